"""Placeholder: the `packnet` plugin registers nothing yet."""
