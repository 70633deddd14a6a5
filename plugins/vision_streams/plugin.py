"""Placeholder: the `vision_streams` plugin registers nothing yet."""
