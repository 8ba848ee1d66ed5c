"""The fence Job's program: set a faulted GPU's compute mode to PROHIBITED on the host (and, when
the site allows it, drain it), read the mode back, and report (docs/isolation.md)."""
