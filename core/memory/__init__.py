"""Memory: the service behind every memory command, reflection, cleanup, hybrid recall."""
