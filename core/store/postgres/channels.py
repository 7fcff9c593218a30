"""A channel's own memory in PostgreSQL (:class:`core.store.channels.ChannelStore`): the
m015 tables ``channels`` and ``channel_entries``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

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
from core.store.postgres.base import PostgresBase
from core.store.postgres.migrations import numbered
from core.types import Attribution, ChannelInfo

_BUMP_CHANNEL = numbered(BUMP_CHANNEL)


def _same(value: Any) -> Any:
    return value


class PostgresChannels(Part[PostgresBase], ChannelRules):
    """The channels part of the PostgreSQL store: channels seen, their memory's settings,
    the attribution of their entries (a channel seen and touched:
    :class:`core.store.channels.ChannelRules`)."""

    async def channel(self, *, channel_key: str) -> ChannelInfo | None:
        row = await self.db._fetchrow(
            f"SELECT {CHANNEL_COLUMNS} FROM {CHANNEL_FROM} WHERE c.channel_key = $1", channel_key
        )
        return None if row is None else channel_from_row(list(row), when=_same)

    async def list_channels(self) -> list[ChannelInfo]:
        rows = await self.db._fetch(
            f"SELECT {CHANNEL_COLUMNS}, COALESCE(u.n_docs, 0) FROM channels c"
            ' LEFT JOIN users u ON u.user_key = c.channel_key ORDER BY c.channel_key COLLATE "C"'
        )
        return [channel_from_row(list(r), when=_same, entries=r[10]) for r in rows]

    async def attribute(self, *, channel_key: str, entries: Sequence[Attribution]) -> None:
        if entries:
            async with self.db._tx() as conn:
                await write_attribution(conn, channel_key, entries)

    async def mark_changed(self, *, memory_ids: Sequence[int], by: str) -> None:
        async with self.db._tx() as conn:
            await conn.execute(
                "UPDATE channel_entries SET changed_by = $1 WHERE memory_id = ANY($2::bigint[])",
                by,
                list(memory_ids),
            )
            await conn.execute(
                "UPDATE channels SET version = version + 1 WHERE channel_key IN (SELECT"
                " channel_key FROM channel_entries WHERE memory_id = ANY($1::bigint[]))",
                list(memory_ids),
            )

    async def attributions(
        self, *, channel_key: str, memory_ids: Sequence[int] | None
    ) -> dict[int, Attribution]:
        if memory_ids is None:
            every = await self.db._fetch(
                f"SELECT {ATTRIBUTION_COLUMNS} FROM channel_entries WHERE channel_key = $1",
                channel_key,
            )
            return {int(r[0]): attribution_from_row(list(r), when=_same) for r in every}
        rows = await self.db._fetch(
            f"SELECT {ATTRIBUTION_COLUMNS} FROM channel_entries WHERE channel_key = $1"
            " AND memory_id = ANY($2::bigint[])",
            channel_key,
            list(memory_ids),
        )
        return {int(r[0]): attribution_from_row(list(r), when=_same) for r in rows}


async def write_attribution(
    conn: asyncpg.Connection, channel_key: str, entries: Sequence[Attribution]
) -> None:
    """Inside a transaction: record (or replace) who said each entry
    (:meth:`PostgresChannels.attribute`; an entry whose memory is gone is skipped) and give
    the channel a new revision."""
    await conn.executemany(
        "INSERT INTO channel_entries(memory_id, channel_key, said_by, said_by_name,"
        " said_at, link, changed_by)"
        " SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS"
        " (SELECT 1 FROM memories WHERE id = $1)"
        " ON CONFLICT (memory_id) DO UPDATE SET channel_key = excluded.channel_key,"
        " said_by = excluded.said_by, said_by_name = excluded.said_by_name,"
        " said_at = excluded.said_at, link = excluded.link,"
        " changed_by = excluded.changed_by",
        [
            (a.memory_id, channel_key, a.said_by, a.said_by_name, a.said_at, a.link, a.changed_by)
            for a in entries
        ],
    )
    await conn.execute(_BUMP_CHANNEL, channel_key)
