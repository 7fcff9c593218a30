"""Links to one platform message, and the label naming a person by their platform id, from
the keys the adapters store (pure functions)."""

from __future__ import annotations

from core.platforms import platform_named, platform_of_key
from core.rules.text import as_data


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


def speaker(user_key: str | None, author: str | None) -> str:
    """Who said a line of a shared conversation, as the prompt labels it: a person by the
    platform id in their verified ``user_key`` (``slack:T1:U3`` and ``discord:42`` as
    ``<@U3>`` and ``<@42>``, as :attr:`core.platforms.Platform.mention` writes a mention),
    never by a display name (anyone can set one, a Discord server nickname included); a
    line with no user key (a bot's or a webhook's, stored as thread context) as
    ``bot "name"``, its name JSON-quoted data (:func:`core.rules.text.as_data`: a webhook
    calling itself ``<@U3>`` reads ``bot "\u003c@U3\u003e"``, not U3's line)."""
    if not user_key:
        return f"bot {as_data(author or 'unnamed')}"
    platform, parts = platform_of_key(user_key)
    ident = parts[-1]
    mention = platform.mention if platform is not None else None
    if mention is not None and len(parts) > 1 and ident.isalnum():
        return mention.replace("{id}", ident)
    return as_data(user_key)
