"""Streaming load generator for OpenAI-compatible servers: library and `python -m` CLI."""
