"""Placeholder: the `inclora` plugin registers nothing yet."""
