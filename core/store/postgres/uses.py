"""The recall log in PostgreSQL (:class:`core.store.seams.RecallLog`): ``memory_uses`` (m013),
one row per memory that was recalled or confirmed, deleted with the memory by cascade.

Row locks are always taken in memory id order (the turn's upsert and a write's statements),
so a turn and a memory write of one user never deadlock on them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from core.store.composed import Part
from core.store.postgres.base import PostgresBase
from core.store.rows import RECALL_LOG_STARTED, USE_COLUMNS, use_from_row
from core.types import MemoryUse

RECALLED = (
    "INSERT INTO memory_uses(memory_id, uid, recalls, last_recalled_at)"
    " SELECT m.id, m.uid, 1, $1 FROM memories m"
    " WHERE m.uid = (SELECT uid FROM users WHERE user_key = $2) AND m.id = ANY($3::bigint[])"
    " ORDER BY m.id ON CONFLICT (memory_id) DO UPDATE SET"
    " recalls = memory_uses.recalls + 1, last_recalled_at = excluded.last_recalled_at"
)
"""One more recall at $1 for each of user $2's memories among the ids $3."""


class PostgresRecallLog(Part[PostgresBase]):
    """The recall log part of the PostgreSQL store (:class:`core.store.seams.RecallReads`;
    confirmations: :mod:`core.store.memories`)."""

    async def memory_uses(
        self, *, user_key: str, memory_ids: Sequence[int] | None = None
    ) -> dict[int, MemoryUse]:
        uid = await self.db._uid(user_key)
        if uid is None:
            return {}
        if memory_ids is None:
            rows = await self.db._fetch(
                f"SELECT {USE_COLUMNS} FROM memory_uses WHERE uid = $1", uid
            )
        else:
            rows = await self.db._fetch(
                f"SELECT {USE_COLUMNS} FROM memory_uses WHERE uid = $1"
                " AND memory_id = ANY($2::bigint[])",
                uid,
                list(memory_ids),
            )
        return dict(use_from_row(r) for r in rows)

    async def recall_log_started(self) -> datetime | None:
        at = await self.db._fetchval(RECALL_LOG_STARTED)
        return at if isinstance(at, datetime) else None
