"""Placeholder: the `nlora` plugin registers nothing yet."""
