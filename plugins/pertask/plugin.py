"""Placeholder: the `pertask` plugin registers nothing yet."""
