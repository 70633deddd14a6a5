"""Placeholder: the `lps` plugin registers nothing yet."""
