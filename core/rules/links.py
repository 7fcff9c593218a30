"""Links to one platform message, from the keys the adapters store (pure functions)."""

from __future__ import annotations

from core.platforms import platform_named


def message_link(platform: str, conversation_key: str, ref: str | None) -> str | None:
    """A link to one message from its conversation key and platform id, where the platform
    gives one: Slack's permalink form ``https://slack.com/archives/{channel}/p{ts without
    the dot}`` (Slack's "Copy link" form, redirected to the workspace) and Discord's jump
    URL ``https://discord.com/channels/{guild}/{channel or thread}/{message}``; None for
    anything else (:attr:`core.platforms.Platform.message_link`). Keys as the adapters make
    them (``slack:T:C:thread``, ``discord:G:C[:root]``)."""
    if not ref:
        return None
    described = platform_named(platform)
    if described is None:
        return None
    return described.message_link(conversation_key.split(":"), ref)
