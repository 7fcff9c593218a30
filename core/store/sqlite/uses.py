"""The recall log in SQLite (:class:`core.store.seams.RecallLog`): ``memory_uses`` (m015), one
row per memory that was recalled or confirmed, deleted with the memory by trigger."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence
from datetime import datetime

from core.store.composed import Part
from core.store.rows import RECALL_LOG_STARTED, USE_COLUMNS, use_from_row
from core.store.sqlite.base import SQLiteBase, dt
from core.types import MemoryUse

logger = logging.getLogger(__name__)

_RECALLED = (
    "INSERT INTO memory_uses(memory_id, uid, recalls, last_recalled_at)"
    " SELECT m.id, m.uid, 1, ? FROM memories m JOIN users u ON u.uid = m.uid"
    " WHERE u.user_key = ? AND m.id IN (SELECT value FROM json_each(?))"
    " ON CONFLICT(memory_id) DO UPDATE SET recalls = recalls + 1,"
    " last_recalled_at = excluded.last_recalled_at"
)


def record_recalls(
    conn: sqlite3.Connection, *, user_key: str, memory_ids: Sequence[int], at: str
) -> bool:
    """Inside a write operation (on the connection's thread): one more recall, at ``at``, for
    each of ``user_key``'s memories among ``memory_ids``, in a SAVEPOINT of its own. False,
    with the operation's other writes kept, when the upsert failed."""
    conn.execute("SAVEPOINT recall_log")
    try:
        conn.execute(_RECALLED, (at, user_key, json.dumps(sorted(set(memory_ids)))))
    except sqlite3.Error as exc:
        if not conn.in_transaction:  # disk full, I/O error: the whole step is gone
            raise
        conn.execute("ROLLBACK TO recall_log")
        conn.execute("RELEASE recall_log")
        logger.warning("recall record dropped: %s", type(exc).__name__)
        return False
    conn.execute("RELEASE recall_log")
    return True


class SQLiteRecallLog(Part[SQLiteBase]):
    """The recall log part of the SQLite store (:class:`core.store.seams.RecallReads`;
    confirmations: :mod:`core.store.memories`)."""

    async def memory_uses(
        self, *, user_key: str, memory_ids: Sequence[int] | None = None
    ) -> dict[int, MemoryUse]:
        sql = (
            f"SELECT {USE_COLUMNS} FROM memory_uses"
            " WHERE uid = (SELECT uid FROM users WHERE user_key = ?)"
        )
        params: tuple[str, ...] = (user_key,)
        if memory_ids is not None:
            sql += " AND memory_id IN (SELECT value FROM json_each(?))"
            params += (json.dumps(list(memory_ids)),)
        return dict(use_from_row(r, time=dt) for r in await self.db._fetchall(sql, params))

    async def recall_log_started(self) -> datetime | None:
        row = await self.db._fetchone(RECALL_LOG_STARTED)
        return dt(row[0]) if row else None
