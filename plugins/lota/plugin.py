"""Placeholder: the `lota` plugin registers nothing yet."""
