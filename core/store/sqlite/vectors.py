"""Embedding storage in SQLite for optional semantic recall (see :mod:`core.memory.hybrid`).

Vectors are float32 bytes (``numpy.ndarray.tobytes()``), one row per memory, tagged with the
model that made them so a model change can be detected and reindexed.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.store.composed import Part
from core.store.sqlite.base import SQLiteBase


class SQLiteVectors(Part[SQLiteBase]):
    """The vectors part of the SQLite store (:class:`core.store.seams.VectorStore`)."""

    async def put_embeddings(
        self, *, user_key: str, model: str, items: Sequence[tuple[int, bytes]]
    ) -> int:
        """Store vectors for the user's memories (ids of other users are ignored)."""
        if not items:
            return 0
        async with self.db._write():
            row = await self.db._fetchone("SELECT uid FROM users WHERE user_key = ?", (user_key,))
            if row is None:
                return 0
            uid = row[0]
            marks = ",".join("?" * len(items))
            owned = {
                r[0]
                for r in await self.db._fetchall(
                    f"SELECT id FROM memories WHERE uid = ? AND id IN ({marks})",
                    (uid, *[i for i, _ in items]),
                )
            }
            rows = [(i, uid, model, v) for i, v in items if i in owned]
            await self.db._conn.executemany(
                "INSERT OR REPLACE INTO memory_embeddings(memory_id, uid, model, vector)"
                " VALUES (?, ?, ?, ?)",
                rows,
            )
            return len(rows)

    async def active_embeddings(
        self, *, user_key: str, model: str
    ) -> list[tuple[int, str, bytes, str]]:
        """(memory id, reach token, vector, the UTC day it was stored as ``YYYY-MM-DD``) of the
        user's active memories embedded by ``model``, by id."""
        return [
            (r[0], r[1], r[2], r[3])
            for r in await self.db._fetchall(
                # created_at is UTC ISO 8601 (base.ts): its first ten characters are the day.
                "SELECT m.id, m.reach, e.vector, substr(m.created_at, 1, 10)"
                " FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id"
                " JOIN users u ON u.uid = m.uid"
                " WHERE u.user_key = ? AND m.superseded_by IS NULL AND e.model = ?"
                " ORDER BY m.id",
                (user_key, model),
            )
        ]

    async def memories_without_embedding(
        self, *, model: str, user_key: str | None = None, limit: int = 256
    ) -> list[tuple[str, int, str]]:
        """(user key, memory id, text) of active memories lacking a ``model`` embedding."""
        where, params = "", [model]
        if user_key is not None:
            where, params = " AND u.user_key = ?", [model, user_key]
        rows = await self.db._fetchall(
            "SELECT u.user_key, m.id, m.text FROM memories m JOIN users u ON u.uid = m.uid"
            " LEFT JOIN memory_embeddings e ON e.memory_id = m.id AND e.model = ?"
            f" WHERE m.superseded_by IS NULL AND e.memory_id IS NULL{where}"
            " ORDER BY m.id LIMIT ?",
            (*params, limit),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    async def memory_head(self, *, user_key: str) -> int:
        """The user's last memory event id (0 for none): one index seek, run on the event
        loop's thread (:meth:`core.store.sqlite.base.SQLiteBase._fetchall_now`)."""
        row = await self.db._fetchone_now(
            "SELECT (SELECT coalesce(max(id), 0) FROM memory_events WHERE uid = u.uid)"
            " FROM users u WHERE u.user_key = ?",
            (user_key,),
        )
        return int(row[0]) if row else 0

    async def embedding_version(self, *, user_key: str, model: str) -> tuple[int, int, int]:
        """(last memory event id, active memories, those embedded by ``model``) of the user."""
        row = await self.db._fetchone(
            "SELECT (SELECT coalesce(max(id), 0) FROM memory_events WHERE uid = u.uid),"
            " count(m.id), count(e.memory_id) FROM users u"
            " LEFT JOIN memories m ON m.uid = u.uid AND m.superseded_by IS NULL"
            " LEFT JOIN memory_embeddings e ON e.memory_id = m.id AND e.model = ?"
            " WHERE u.user_key = ? GROUP BY u.uid",
            (model, user_key),
        )
        return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)
