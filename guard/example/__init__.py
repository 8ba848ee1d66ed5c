"""The built-in example: the 21 September incident replayed in a local Prometheus."""
