"""Placeholder: the `seqlora` plugin registers nothing yet."""
