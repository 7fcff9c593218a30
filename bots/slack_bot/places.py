"""Where a Slack message, command or Home tab view was said (:class:`core.types.Place`).

The workspace (one rule, used for events, slash commands and the Home tab): the
``enterprise_id`` when Slack gives one (an Enterprise Grid org: all its workspaces are one
place), else the ``team_id`` of the install; a Slack Connect channel (externally shared:
the event's ``is_ext_shared_channel``, ``conversations.info``'s ``is_ext_shared``) is a
workspace of its own, ``connect-{channel}``, so nothing learned there reaches the home
workspace's public channels, and nothing from those reaches the other organisation.

The kind: an event's ``channel_type`` (``im`` a DM, ``mpim`` a group DM, ``group`` a private
channel, ``channel`` a public one); where Slack does not give it (``app_mention``, slash
commands), ``conversations.info`` (``is_im``, ``is_mpim``, ``is_private``), cached per
channel for :data:`KIND_TTL_S` and replaced by what any later event says (a public channel
converted to a private one, or shared with another organisation, is known as such from its
next event, or within that time); when that fails, the narrowest guess from the id (``D``
or ``G``: a group DM, as a DM the bot cannot read is not its own; otherwise a private
channel). A DM that is not the person's DM with the bot (a slash command used in a DM
between two people) is a group DM of those people.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from core.types import Place, PlaceKind

logger = logging.getLogger(__name__)

CHANNEL_TYPES: dict[str, PlaceKind] = {
    "im": "dm",
    "mpim": "group_dm",
    "group": "private_channel",
    "channel": "public_channel",
}
"""An event's ``channel_type`` -> the place's kind (docs.slack.dev, the message event)."""

KNOWN_CHANNELS = 10_000
"""Channels whose kind is remembered (in memory); the oldest drop out."""

KIND_TTL_S = 300.0
"""How long a kind read from ``conversations.info`` is used before it is read again: Slack
lets an admin convert a public channel to a private one, and an ``app_mention`` (no
``channel_type``) in it must not be learned as public for longer than this."""


def slack_workspace(*, team: str, enterprise: str | None, connect: bool, channel: str) -> str:
    """The module's workspace rule."""
    if connect:
        return f"connect-{channel}"
    return enterprise or team


def kind_by_id(channel: str) -> PlaceKind:
    """The narrowest kind a channel id allows when Slack says nothing more."""
    if channel.startswith(("D", "G")):
        return "group_dm"  # a DM the bot cannot read is not its own: as a group DM
    return "private_channel"


def kind_of_info(info: dict[str, Any]) -> PlaceKind:
    """The kind ``conversations.info``'s channel object gives."""
    if info.get("is_im"):
        return "dm"
    if info.get("is_mpim"):
        return "group_dm"
    if info.get("is_private") or info.get("is_group"):
        return "private_channel"
    if info.get("is_channel"):
        return "public_channel"
    return kind_by_id(str(info.get("id") or ""))


class ChannelKinds:
    """The kind of each channel and whether it is a Slack Connect channel, read once from
    ``conversations.info`` (bounded cache)."""

    def __init__(
        self, client: AsyncWebClient, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = client
        self.clock = clock
        # channel -> (kind, Slack Connect, an IM's other person, read at)
        self._known: OrderedDict[str, tuple[PlaceKind, bool, str | None, float]] = OrderedDict()

    def note(self, channel: str, kind: PlaceKind, connect: bool) -> None:
        """Remember what an event said of ``channel`` (Slack's word now: it replaces what
        was known, an IM's other person kept while it is still an IM)."""
        known = self._known.get(channel)
        other = known[2] if known is not None and known[0] == kind else None
        self._known[channel] = (kind, connect, other, self.clock())
        self._known.move_to_end(channel)
        self._trim()

    def _trim(self) -> None:
        while len(self._known) > KNOWN_CHANNELS:
            self._known.popitem(last=False)

    async def lookup(self, channel: str) -> tuple[PlaceKind, bool, str | None]:
        """(kind, Slack Connect, the DM's other person for an IM) of ``channel``; the id's
        narrowest guess when Slack cannot say (not cached then)."""
        known = self._known.get(channel)
        if known is not None and self.clock() - known[3] < KIND_TTL_S:
            return known[:3]
        try:
            response = await self.client.conversations_info(channel=channel)
        except (SlackApiError, OSError, TimeoutError) as exc:
            logger.info("conversations.info %s failed (%s): kind from its id", channel, exc)
            return kind_by_id(channel), False, None
        info = response.get("channel") or {}
        found = (
            kind_of_info(info),
            bool(info.get("is_ext_shared") or info.get("is_shared")),
            str(info["user"]) if info.get("user") else None,
        )
        self._known[channel] = (*found, self.clock())
        self._known.move_to_end(channel)
        self._trim()
        return found

    async def place(self, *, team: str, enterprise: str | None, channel: str, user: str) -> Place:
        """Where a slash command (or an event without ``channel_type``) of ``user`` in
        ``channel`` was said."""
        kind, connect, other = await self.lookup(channel)
        if kind == "dm" and other is not None and other != user:
            kind = "group_dm"  # a DM between two people, not the person's DM with the bot
        return Place(
            platform="slack",
            kind=kind,
            workspace=slack_workspace(
                team=team, enterprise=enterprise, connect=connect, channel=channel
            ),
            channel=channel,
        )


def home_place(*, team: str, enterprise: str | None) -> Place:
    """The Home tab: the person's own view, as their DM with the bot."""
    return Place(platform="slack", kind="dm", workspace=enterprise or team)
