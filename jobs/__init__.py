"""The Job templates (the top-level jobs/ of the repository), shipped in the wheel as package data."""
