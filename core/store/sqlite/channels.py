"""A channel's own memory in SQLite (:class:`core.store.channels.ChannelStore`): the m018
tables ``channels`` and ``channel_entries``."""

from __future__ import annotations

import json
from collections.abc import Sequence

import aiosqlite

from core.store.channels import (
    ATTRIBUTION_COLUMNS,
    BUMP_CHANNEL,
    CHANNEL_COLUMNS,
    CHANNEL_FROM,
    ChannelRules,
    attribution_from_row,
    channel_from_row,
)
from core.store.composed import Part
from core.store.sqlite.base import SQLiteBase, dt, ts
from core.types import Attribution, ChannelInfo


class SQLiteChannels(Part[SQLiteBase], ChannelRules):
    """The channels part of the SQLite store: channels seen, their memory's settings, the
    attribution of their entries (a channel seen and touched:
    :class:`core.store.channels.ChannelRules`)."""

    async def channel(self, *, channel_key: str) -> ChannelInfo | None:
        row = await self.db._fetchone(
            f"SELECT {CHANNEL_COLUMNS} FROM {CHANNEL_FROM} WHERE c.channel_key = ?", (channel_key,)
        )
        return None if row is None else channel_from_row(row, when=dt)

    async def list_channels(self) -> list[ChannelInfo]:
        rows = await self.db._fetchall(
            f"SELECT {CHANNEL_COLUMNS} FROM {CHANNEL_FROM} ORDER BY c.channel_key"
        )
        return [channel_from_row(r, when=dt) for r in rows]

    async def attribute(self, *, channel_key: str, entries: Sequence[Attribution]) -> None:
        if entries:
            async with self.db._write():
                await write_attribution(self.db._conn, channel_key, entries)

    async def mark_changed(self, *, memory_ids: Sequence[int], by: str) -> None:
        async with self.db._write():
            ids = json.dumps(list(memory_ids))
            await self.db._conn.execute(
                "UPDATE channel_entries SET changed_by = ?"
                " WHERE memory_id IN (SELECT value FROM json_each(?))",
                (by, ids),
            )
            await self.db._conn.execute(
                "UPDATE channels SET version = version + 1 WHERE channel_key IN (SELECT"
                " channel_key FROM channel_entries WHERE memory_id IN"
                " (SELECT value FROM json_each(?)))",
                (ids,),
            )

    async def attributions(
        self, *, channel_key: str, memory_ids: Sequence[int] | None
    ) -> dict[int, Attribution]:
        if memory_ids is None:
            every = await self.db._fetchall(
                f"SELECT {ATTRIBUTION_COLUMNS} FROM channel_entries WHERE channel_key = ?",
                (channel_key,),
            )
            return {int(r[0]): attribution_from_row(r, when=dt) for r in every}
        rows = await self.db._fetchall(
            f"SELECT {ATTRIBUTION_COLUMNS} FROM channel_entries WHERE channel_key = ?"
            " AND memory_id IN (SELECT value FROM json_each(?))",
            (channel_key, json.dumps(list(memory_ids))),
        )
        return {int(r[0]): attribution_from_row(r, when=dt) for r in rows}


async def write_attribution(
    conn: aiosqlite.Connection, channel_key: str, entries: Sequence[Attribution]
) -> None:
    """Inside a write: record (or replace) who said each entry (:meth:`SQLiteChannels.attribute`;
    an entry whose memory is gone is skipped) and give the channel a new revision."""
    await conn.executemany(
        "INSERT OR REPLACE INTO channel_entries(memory_id, channel_key, said_by,"
        " said_by_name, said_at, link, changed_by)"
        " SELECT ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?)",
        [
            (
                a.memory_id,
                channel_key,
                a.said_by,
                a.said_by_name,
                ts(a.said_at),
                a.link,
                a.changed_by,
                a.memory_id,
            )
            for a in entries
        ],
    )
    await conn.execute(BUMP_CHANNEL, (channel_key,))
