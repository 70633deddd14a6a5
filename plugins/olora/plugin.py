"""Placeholder: the `olora` plugin registers nothing yet."""
