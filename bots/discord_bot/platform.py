"""What the core knows of Discord (:class:`core.platforms.Platform`, registered as the
entry point ``discord`` in ``pyproject.toml``) and how answers stream in Discord.

Keys the Discord adapter makes (:mod:`bots.discord_bot.places`): users ``discord:{user}``,
conversations ``discord:dm:{channel}`` in a DM and ``discord:{guild}:{channel}[:{root}]``
in a server, channels ``discord:{guild}:{channel}``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from core.platforms import Platform
from core.settings import Settings
from core.streaming.reply import StreamConfig
from core.types import Place

#: Discord's message content limit, characters
#: (https://discord.com/developers/docs/resources/message#create-message).
DISCORD_MAX_REPLY_CHARS = 2000


def _conversation_place(parts: Sequence[str]) -> Place | None:
    # A server conversation: a private channel of its guild (the key cannot tell more).
    if len(parts) not in (3, 4) or parts[1] == "dm":
        return None
    return Place(platform="discord", kind="private_channel", workspace=parts[1], channel=parts[2])


def _message_link(parts: Sequence[str], ref: str) -> str | None:
    # The jump URL: https://discord.com/channels/{guild}/{channel or thread}/{message}.
    if len(parts) in (3, 4) and parts[1].isdigit() and parts[2].isdigit() and ref.isdigit():
        return f"https://discord.com/channels/{parts[1]}/{parts[2]}/{ref}"
    return None


_LINK = re.compile(r"^https://discord\.com/channels/(\d+)/(\d+)/\d+$")


def _linked_conversation(link: str) -> list[str] | None:
    # A jump URL names its guild and its channel or thread: that conversation's key, whose
    # conversation_place is that channel or thread (a private place: the link cannot tell).
    found = _LINK.match(link)
    return None if found is None else ["discord", found.group(1), found.group(2)]


DISCORD = Platform(
    name="discord",
    title="Discord",
    conversation_place=_conversation_place,
    message_link=_message_link,
    linked_conversation=_linked_conversation,
    mention="<@{id}>",
    allow_lists=("allowed_discord_guilds", "allowed_discord_channels"),
    channels=True,
)


def stream_config(
    *, max_chars: int = DISCORD_MAX_REPLY_CHARS, edit_interval_s: float = 1.0
) -> StreamConfig:
    """How answers stream in Discord: standard Markdown as it is, by edits."""
    return StreamConfig(max_chars=max_chars, edit_interval_s=edit_interval_s)


def settings_stream_config(settings: Settings) -> StreamConfig:
    """:func:`stream_config` with the limits ``settings`` set."""
    return stream_config(
        max_chars=settings.discord_max_reply_chars,
        edit_interval_s=settings.discord_edit_interval_s,
    )
