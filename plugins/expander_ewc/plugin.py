"""Placeholder: the `expander_ewc` plugin registers nothing yet."""
