"""The Discord adapter: discord.py client, routing, commands, sink."""
