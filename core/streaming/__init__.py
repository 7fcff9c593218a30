"""Streamed replies over a ReplySink, and chunking of Markdown per platform."""
