"""The Slack adapter: bolt app (Socket Mode / HTTP), events, commands, sink, blocks."""
