"""A channel's own memory in the store, the part both backends share: the seam
(:class:`ChannelStore`), the settings row's columns and how a row becomes a
:class:`core.types.ChannelInfo`.

The channel's entries are memories owned by the channel key (``slack:T1:C1``,
``discord:GUILD:CHANNEL``) through the ordinary :class:`core.store.seams.MemoryStore`, so
recall, dedupe, forget, export, cleanup changes (undo) and ``db copy`` are the memories' own.
Two tables add what memories lack: ``channels`` (one row per channel seen: kind, memory on
or off, who changed it, who may) and ``channel_entries`` (who said each entry, when, a link
to the message; deleted with the memory). Reflection finds a turn's channel in its place
(``turns.place``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, cast

from core.store.statements import StatementHook
from core.types import Attribution, ChannelInfo, Place, PlaceKind, utcnow

CHANNEL_COLUMNS = (
    "c.channel_key, c.platform, c.workspace, c.channel, c.kind, c.memory_on, c.memory_kind,"
    " c.changed_by, c.changed_at, c.allowed, c.version, COALESCE(u.n_docs, 0),"
    " COALESCE(u.total_len, 0)"
)
"""The columns :func:`channel_from_row` reads, in order: ``channels c LEFT JOIN users u ON
u.user_key = c.channel_key`` (:data:`CHANNEL_FROM`)."""

CHANNEL_FROM = "channels c LEFT JOIN users u ON u.user_key = c.channel_key"
"""The ``FROM`` of :data:`CHANNEL_COLUMNS`."""

ATTRIBUTION_COLUMNS = "memory_id, said_at, said_by, said_by_name, link, changed_by"
"""The ``channel_entries`` columns :func:`attribution_from_row` reads, in order."""


def channel_from_row(row: Sequence[Any], *, when: Any, entries: int = 0) -> ChannelInfo:
    """A ``channels`` row (:data:`CHANNEL_COLUMNS`) as :class:`ChannelInfo`; ``when`` turns
    the backend's time value into an aware datetime."""
    return ChannelInfo(
        key=row[0],
        platform=row[1],
        workspace=row[2],
        channel=row[3],
        kind=cast(PlaceKind, row[4]),
        memory_on=bool(row[5]),
        memory_kind=cast(PlaceKind | None, row[6]),
        changed_by=row[7],
        changed_at=None if row[8] is None else when(row[8]),
        allowed=tuple(str(row[9]).split()),
        entries=int(row[11]),
        revision=f"{row[10]}:{row[11]}:{row[12]}",
    )


def attribution_from_row(row: Sequence[Any], *, when: Any) -> Attribution:
    """A ``channel_entries`` row (:data:`ATTRIBUTION_COLUMNS`) as :class:`Attribution`."""
    return Attribution(
        memory_id=int(row[0]),
        said_at=when(row[1]),
        said_by=row[2],
        said_by_name=row[3],
        link=row[4],
        changed_by=row[5],
    )


class ChannelStore(Protocol):
    """Channels seen, their memory's settings and the attribution of their entries."""

    async def see_channel(self, *, place: Place) -> ChannelInfo | None:
        """The channel ``place`` names (None for a DM or group DM): recorded the first time
        (memory off), its kind updated when it changed. Writes only then."""
        ...

    async def channel(self, *, channel_key: str) -> ChannelInfo | None:
        """The channel's row as stored now (read on every message: a change made by another
        process shows at once), None when never seen."""
        ...

    async def set_channel_memory(
        self,
        *,
        channel_key: str,
        on: bool,
        by: str,
        at: datetime,
        allowed: Sequence[str] | None = None,
    ) -> ChannelInfo | None:
        """Turn the channel's memory on (reviewed: kept under the channel's kind now) or off
        (entries kept, unused); ``allowed`` replaces who may do so when given. None (nothing
        changed) for a channel never seen."""
        ...

    async def list_channels(self) -> list[ChannelInfo]:
        """Every channel seen with its active entries' count, by key."""
        ...

    async def attribute(self, *, channel_key: str, entries: Sequence[Attribution]) -> None:
        """Record (or replace) who said each entry (memories of ``channel_key``)."""
        ...

    async def mark_changed(self, *, memory_ids: Sequence[int], by: str) -> None:
        """Record ``by`` as who changed these entries last (a correction, a forget)."""
        ...

    async def touch_channel(self, *, channel_key: str) -> None:
        """Give the channel a new revision (:attr:`ChannelInfo.revision`) after a change its
        entries' counts may not show (an undo)."""
        ...

    async def attributions(
        self, *, channel_key: str, memory_ids: Sequence[int] | None
    ) -> dict[int, Attribution]:
        """Who said each of these entries of the channel (ids without a row are absent);
        ``None``: every entry of the channel."""
        ...

    async def unattribute(self, *, user_key: str) -> int:
        """Remove ``user_key``'s name from every entry they said (``/forget all``); the
        entries stay. Returns how many."""
        ...


SEE_CHANNEL = (
    "INSERT INTO channels(channel_key, platform, workspace, channel, kind, seen_at)"
    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (channel_key) DO UPDATE SET"
    " kind = excluded.kind, seen_at = excluded.seen_at,"
    " memory_kind = CASE WHEN excluded.kind = 'private_channel'"
    " AND channels.memory_kind IS NOT NULL THEN 'private_channel' ELSE channels.memory_kind END"
    " WHERE channels.kind <> excluded.kind"
)
"""A channel seen (both dialects; ``?`` placeholders: channel key, platform, workspace,
channel, kind, seen at): recorded the first time, its kind updated when it changed. A
channel that turns private narrows the privacy its memory is kept under, so what is learned
there from then on stays unused when the channel turns public again, until someone in the
channel reviews it (:attr:`core.types.ChannelInfo.needs_review`); it is never widened here."""


class ChannelRules(StatementHook):
    """The channel writes both backends share, over the backend's read (:meth:`channel`)
    and its run of statements (:meth:`core.store.statements.StatementHook._run_statements`)."""

    @abstractmethod
    async def channel(self, *, channel_key: str) -> ChannelInfo | None:
        """As :meth:`ChannelStore.channel`."""

    async def see_channel(self, *, place: Place) -> ChannelInfo | None:
        """:meth:`ChannelStore.see_channel`: read first (every message asks), write
        (:data:`SEE_CHANNEL`) only a channel never seen or whose kind changed, then read what
        is stored."""
        key = place.channel_key
        if key is None or place.channel is None:
            return None
        info = await self.channel(channel_key=key)
        if info is None or info.kind != place.kind:
            seen = (key, place.platform, place.workspace, place.channel, place.kind, utcnow())
            await self._run_statements([(SEE_CHANNEL, seen)])
            info = await self.channel(channel_key=key)
        return info

    async def set_channel_memory(
        self,
        *,
        channel_key: str,
        on: bool,
        by: str,
        at: datetime,
        allowed: Sequence[str] | None = None,
    ) -> ChannelInfo | None:
        """:meth:`ChannelStore.set_channel_memory`: turned on, the memory is kept under the
        channel's kind now (reviewed)."""
        update = (
            "UPDATE channels SET memory_on = ?, changed_by = ?, changed_at = ?,"
            " memory_kind = CASE WHEN ? THEN kind ELSE memory_kind END,"
            " allowed = COALESCE(?, allowed) WHERE channel_key = ?"
        )
        who = None if allowed is None else " ".join(allowed)
        (changed,) = await self._run_statements([(update, (on, by, at, on, who, channel_key))])
        return None if changed == 0 else await self.channel(channel_key=channel_key)

    async def unattribute(self, *, user_key: str) -> int:
        """:meth:`ChannelStore.unattribute`: the channels it touches get a new revision."""
        _, unnamed, _ = await self._run_statements(
            [
                (
                    "UPDATE channels SET version = version + 1 WHERE channel_key IN"
                    " (SELECT channel_key FROM channel_entries WHERE said_by = ?)",
                    (user_key,),
                ),
                (
                    "UPDATE channel_entries SET said_by = NULL, said_by_name = NULL"
                    " WHERE said_by = ?",
                    (user_key,),
                ),
                (
                    "UPDATE channel_entries SET changed_by = NULL WHERE changed_by = ?",
                    (user_key,),
                ),
            ]
        )
        return unnamed

    async def touch_channel(self, *, channel_key: str) -> None:
        """:meth:`ChannelStore.touch_channel`."""
        await self._run_statements([(BUMP_CHANNEL, (channel_key,))])


BUMP_CHANNEL = "UPDATE channels SET version = version + 1 WHERE channel_key = ?"
"""A new revision of the channel (``?``: its key)."""


async def channel_keys(store: ChannelStore) -> frozenset[str]:
    """The keys that own channels' entries (``slack:T1:C1``): never a person, so what runs
    per user (``selfmind users``, scheduled cleanup, nightly consolidation) leaves them out;
    a channel's entries change only through its members' announced commands."""
    return frozenset(c.key for c in await store.list_channels())
