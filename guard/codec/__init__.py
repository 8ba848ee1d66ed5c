"""The texts read and plan share (docs/architecture.md), so that plan/ never imports read/."""
