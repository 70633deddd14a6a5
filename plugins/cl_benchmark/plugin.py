"""Placeholder: the `cl_benchmark` plugin registers nothing yet."""
