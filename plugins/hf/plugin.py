"""Placeholder: the `hf` plugin registers nothing yet."""
