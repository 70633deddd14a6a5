"""Placeholder: the `lora` plugin registers nothing yet."""
