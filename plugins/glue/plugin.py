"""Placeholder: the `glue` plugin registers nothing yet."""
