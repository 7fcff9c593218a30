"""Discord's attachments in the core's terms: each ``discord.Attachment`` of a message as a
:class:`core.files.FileRef` (the reading rule itself is :mod:`core.files`'s).

An attachment (Discord API, "Attachment object") declares its ``filename``, ``size`` (bytes)
and ``content_type``, and its bytes are at ``url`` on Discord's CDN: a signed link (``ex``,
``is``, ``hm`` parameters) that needs no token, so none is sent. The download may reach only
Discord's CDN hosts, or the host of ``DISCORD_API_BASE_URL`` when that is set (a
Discord-compatible server, the tests' fake).
"""

from __future__ import annotations

from collections.abc import Sequence

import discord

from core.files import FileRef
from core.files.fetch import origin

CDN_HOSTS = ("https://cdn.discordapp.com", "https://media.discordapp.net")


def file_origins(api_base_url: str | None) -> frozenset[str]:
    """Where attachments may be downloaded from (see the module docstring)."""
    origins = {origin(host) for host in CDN_HOSTS}
    if api_base_url:
        origins.add(origin(api_base_url))
    return frozenset(origins)


def file_refs(
    attachments: Sequence[discord.Attachment], *, origins: frozenset[str]
) -> tuple[FileRef, ...]:
    """One :class:`FileRef` per attachment, in order."""
    return tuple(
        FileRef(
            a.filename,
            size=a.size,
            media_type=a.content_type,
            url=a.url,
            allowed_origins=origins,
        )
        for a in attachments
    )
