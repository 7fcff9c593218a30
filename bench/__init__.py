"""Benchmarks: run as scripts (``python bench/retrieval.py``); each prints a table."""
