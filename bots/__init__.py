"""Thin platform adapters (terminal, Slack, Discord) and the ``selfmind`` command."""
