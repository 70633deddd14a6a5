"""Placeholder: the `mtl` plugin registers nothing yet."""
