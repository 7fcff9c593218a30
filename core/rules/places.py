"""The place rule: where a memory learned in one place may be used (issue 35).

A memory records the :class:`core.types.Place` it was learned in. It is used when its
owner asks in place ``A`` if and only if:

- ``A`` is the owner's own DM with the bot, or the terminal (``kind == "dm"``): every
  memory of theirs;
- ``A`` is the same group DM, or the same private channel (its threads belong to it), as
  the place it was learned in;
- it was learned in a public channel and ``A`` is a public channel of the same platform
  and the same workspace (Slack team, or the enterprise on Enterprise Grid; a Slack Connect
  channel is a workspace of its own; the Discord guild): never another workspace's or
  guild's;
- or the operator opted in with ``SELFMIND_RECALL_PRIVATE_IN_CHANNELS`` (every memory
  everywhere, as that setting always meant). Nothing else widens a memory's reach but its
  owner saying it again where it is not usable (:func:`widened_place`,
  :mod:`core.rules.reassert`).

The rule is computed by comparing one short token per place, its *reach*
(:func:`reach_of`): a memory is usable in ``A`` iff ``A`` is a DM or the memory's reach
equals ``A``'s. The stores keep the token beside each memory (``memories.reach``), so
recall pushes the rule into SQL (SQLite: an FTS5 marker term ``u{uid}__{reach}``;
PostgreSQL: ``reach = ANY(...)``) and the profile's listings filter on it.

Pure functions, no I/O; :func:`usable` is the rule as a predicate (docs/privacy.md's
table is generated from it in tests).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from core.platforms import LOCAL, platform_of_key
from core.types import PLACE_KINDS, Place, PlaceKind, Turn

DM_REACH = "dm"
"""The reach of a memory learned in its owner's DM (or the terminal): that DM only."""

_UNSAFE = re.compile(r"[^a-z0-9]")
_REACH = re.compile(r"^[a-z0-9_]{1,200}$")


def _part(value: str | None) -> str:
    # Slack ids are upper-case letters and digits, Discord's digits: lower-casing is
    # one-to-one on them; anything else is reduced to [a-z0-9] (FTS5 token characters).
    return _UNSAFE.sub("", (value or "").lower()) or "x"


def reach_of(place: Place | None) -> str:
    """The reach token of ``place`` ([a-z0-9_], at most 200 characters): ``dm`` for a DM
    (and for None: unknown is the owner's DM, the narrowest), ``in_{platform}_{workspace}_
    {channel}`` for a group DM or a private channel, ``pub_{platform}_{workspace}`` for a
    public channel."""
    if place is None or place.kind == "dm":
        return DM_REACH
    if place.kind == "public_channel":
        return f"pub_{_part(place.platform)}_{_part(place.workspace)}"[:200]
    return f"in_{_part(place.platform)}_{_part(place.workspace)}_{_part(place.channel)}"[:200]


def usable(
    learned: Place | None, asked: Place | None, *, private_in_channels: bool = False
) -> bool:
    """True when a memory learned in ``learned`` may be used in a prompt answered in
    ``asked`` (the module's rule). ``None`` for ``learned``: the owner's DM; for ``asked``:
    the owner's DM (the terminal, a caller with no platform)."""
    if asked is None or asked.kind == "dm" or private_in_channels:
        return True
    return reach_of(learned) == reach_of(asked)


def usable_reaches(asked: Place | None, *, private_in_channels: bool = False) -> list[str] | None:
    """The reach tokens a prompt answered in ``asked`` may use: None for every memory (a
    DM, the terminal, the operator's opt-in), else the one token of ``asked``. What recall,
    the profile and the listings pass to the store as ``reach``."""
    if asked is None or asked.kind == "dm" or private_in_channels:
        return None
    return [reach_of(asked)]


def widened_place(learned: Place | None, said: Place | None) -> Place | None:
    """The place a stored memory learned in ``learned`` takes when its owner says it again
    in ``said`` where it is not usable, or None when it keeps its place.

    Only a memory learned in the owner's DM (usable there alone) takes ``said``: every
    memory is usable in the owner's DM, so the new place keeps every place the old one had
    and adds exactly the one the owner said it in (that workspace's public channels, that
    group DM or private channel), never another workspace's. A memory learned in a group
    DM, a private channel or a public channel keeps its place: no one place holds both it
    and ``said``, and moving it would take it away from where it was learned.
    """
    if said is None or said.kind == "dm" or usable(learned, said):
        return None
    return said if reach_of(learned) == DM_REACH else None


def check_reaches(reaches: Iterable[str]) -> list[str]:
    """``reaches`` sorted and deduplicated, each checked to be a reach token (so the stores
    may write them into SQL as literals); raises ``ValueError`` otherwise."""
    chosen = sorted(set(reaches))
    for r in chosen:
        if not _REACH.match(r):
            raise ValueError(f"not a reach token: {r!r}")
    return chosen


def place_key(place: Place) -> str:
    """``place`` as stored: ``{kind}:{platform}:{workspace}:{channel}`` (empty parts for
    None); :func:`parse_place` reads it back."""
    return f"{place.kind}:{place.platform}:{place.workspace or ''}:{place.channel or ''}"


def parse_place(key: str | None) -> Place | None:
    """The :class:`Place` stored as ``key`` (:func:`place_key`); None for None, an empty or
    a malformed key (read as the owner's DM by :func:`reach_of`)."""
    if not key:
        return None
    kind, _, rest = key.partition(":")
    platform, _, rest = rest.partition(":")
    workspace, _, channel = rest.rpartition(":")
    if kind not in PLACE_KINDS or not platform:
        return None
    checked: PlaceKind = kind  # type: ignore[assignment]
    return Place(
        platform=platform, kind=checked, workspace=workspace or None, channel=channel or None
    )


def owner_dm(user_key: str) -> Place:
    """The owner's DM with the bot on the platform of ``user_key``, in the workspace the key
    names (:attr:`core.platforms.Platform.user_workspace`: ``slack:{team}:{user}`` -> that
    team's DM; ``discord:...``, ``cli:...`` -> a DM outside any workspace): where a memory
    whose place is not known is treated as learned. A key with no first word is the
    terminal's (:data:`core.platforms.LOCAL`)."""
    platform, parts = platform_of_key(user_key)
    name = parts[0] or LOCAL
    workspace = platform.user_workspace(parts) if platform is not None else None
    return Place(platform=name, kind="dm", workspace=workspace)


def merged_place(places: Sequence[Place | None], *, user_key: str) -> Place:
    """The place of a memory merged from memories learned in ``places``: their place when
    they all share one reach, else the owner's DM (a merge never widens where any part may
    be used: two different reaches have only the owner's DM in common)."""
    reaches = {reach_of(p) for p in places}
    if len(reaches) == 1 and places and places[0] is not None:
        return places[0]
    return owner_dm(user_key)


def place_label(place: Place | None) -> str:
    """A few words naming where a memory was learned, for listings shown to its owner
    ("your DM", "a group DM", "a private channel", "a public channel")."""
    if place is None or place.kind == "dm":
        return "your DM"
    return {
        "group_dm": "a group DM",
        "private_channel": "a private channel",
        "public_channel": "a public channel",
    }[place.kind]


def stored_place(place: Place | None, *, user_key: str) -> tuple[str, str]:
    """The two columns a store writes for a memory learned in ``place`` (None: the owner's
    DM): its :func:`place_key` and its :func:`reach_of` token."""
    chosen = place if place is not None else owner_dm(user_key)
    return place_key(chosen), reach_of(chosen)


def place_of_conversation(
    conversation_key: str | None, *, user_key: str, shared: bool = False
) -> Place:
    """The place a conversation key names, for a turn stored before places were recorded
    (and the migration of older memories): the place its platform reads in it
    (:attr:`core.platforms.Platform.conversation_place`: a Slack channel thread
    ``slack:{install}:{channel}:{thread}`` is a group DM for a ``G`` id and otherwise a
    private channel, the stored data cannot tell public from private: the narrowest; a
    Discord server conversation a private channel of its guild); a DM key
    (``slack:{install}:{D...}``, ``discord:dm:{id}``, ``cli:...``), anything else, or None,
    the owner's DM, unless ``shared`` (said where others read it): then a private place of
    that conversation alone."""
    if not conversation_key:
        return owner_dm(user_key)
    platform, parts = platform_of_key(conversation_key)
    named = platform.conversation_place(parts) if platform is not None else None
    if named is not None:
        return named
    if shared:
        alone = conversation_key.replace(":", "-")
        return Place(platform=parts[0] or LOCAL, kind="private_channel", channel=alone)
    return owner_dm(user_key)


def turn_place(turn: Turn) -> Place:
    """Where a stored user turn was said: its recorded place, else (a turn stored before
    places were) the place its conversation key names when it was said in a shared place
    (:func:`place_of_conversation`), else the owner's DM."""
    if turn.place is not None:
        return turn.place
    owner = turn.user_key or ""
    if turn.origin == "shared":
        return place_of_conversation(turn.conversation_key, user_key=owner, shared=True)
    return owner_dm(owner)
