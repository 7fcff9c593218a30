"""Links to one platform message, from the keys the adapters store (pure functions)."""

from __future__ import annotations


def message_link(platform: str, conversation_key: str, ref: str | None) -> str | None:
    """A link to one message from its conversation key and platform id, where the platform
    gives one: Slack's permalink form ``https://slack.com/archives/{channel}/p{ts without
    the dot}`` (Slack's "Copy link" form, redirected to the workspace) and Discord's jump
    URL ``https://discord.com/channels/{guild}/{channel or thread}/{message}``; None for
    anything else. Keys as the adapters make them (``slack:T:C:thread``,
    ``discord:G:C[:root]``)."""
    if not ref:
        return None
    parts = conversation_key.split(":")
    if platform == "slack" and len(parts) == 4 and ref.replace(".", "").isdigit():
        return f"https://slack.com/archives/{parts[2]}/p{ref.replace('.', '')}"
    if platform == "discord" and len(parts) in (3, 4) and parts[1].isdigit() and ref.isdigit():
        return f"https://discord.com/channels/{parts[1]}/{parts[2]}/{ref}"
    return None
