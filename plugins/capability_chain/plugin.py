"""Placeholder: the `capability_chain` plugin registers nothing yet."""
