"""Embedding storage in PostgreSQL for optional semantic recall (see :mod:`core.memory.hybrid`).

Vectors are float32 bytes (``bytea``), one row per memory, tagged with the model that made
them; a memory's embedding is deleted with it (foreign key, ``ON DELETE CASCADE``).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.store.composed import Part
from core.store.postgres.base import PostgresBase


class PostgresVectors(Part[PostgresBase]):
    """The vectors part of the PostgreSQL store (:class:`core.store.seams.VectorStore`)."""

    async def put_embeddings(
        self, *, user_key: str, model: str, items: Sequence[tuple[int, bytes]]
    ) -> int:
        """Store vectors for the user's memories (ids of other users are ignored)."""
        if not items:
            return 0
        uid = await self.db._uid(user_key)
        if uid is None:
            return 0
        status = await self.db._execute(
            "INSERT INTO memory_embeddings(memory_id, uid, model, vector)"
            " SELECT m.id, m.uid, $2, x.vector"
            " FROM unnest($3::bigint[], $4::bytea[]) AS x(id, vector)"
            " JOIN memories m ON m.id = x.id AND m.uid = $1"
            " ON CONFLICT (memory_id) DO UPDATE SET model = excluded.model,"
            " vector = excluded.vector",
            uid,
            model,
            [i for i, _ in items],
            [v for _, v in items],
        )
        return int(status.split()[-1])

    async def active_embeddings(
        self, *, user_key: str, model: str
    ) -> list[tuple[int, str, bytes, str]]:
        """(memory id, reach token, vector, the UTC day it was stored as ``YYYY-MM-DD``) of the
        user's active memories embedded by ``model``, by id."""
        uid = await self.db._uid(user_key)
        if uid is None:
            return []
        rows = await self.db._fetch(
            "SELECT m.id, m.reach, e.vector,"
            " to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
            " FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id"
            " WHERE m.uid = $1 AND m.superseded_by IS NULL AND e.model = $2 ORDER BY m.id",
            uid,
            model,
        )
        return [(int(r[0]), r[1], bytes(r[2]), r[3]) for r in rows]

    async def memories_without_embedding(
        self, *, model: str, user_key: str | None = None, limit: int = 256
    ) -> list[tuple[str, int, str]]:
        """(user key, memory id, text) of active memories lacking a ``model`` embedding."""
        where, params = "", [model, limit]
        if user_key is not None:
            where, params = " AND u.user_key = $3", [model, limit, user_key]
        rows = await self.db._fetch(
            "SELECT u.user_key, m.id, m.text FROM memories m JOIN users u ON u.uid = m.uid"
            " LEFT JOIN memory_embeddings e ON e.memory_id = m.id AND e.model = $1"
            f" WHERE m.superseded_by IS NULL AND e.memory_id IS NULL{where}"
            " ORDER BY m.id LIMIT $2",
            *params,
        )
        return [(str(r[0]), int(r[1]), str(r[2])) for r in rows]

    async def memory_head(self, *, user_key: str) -> int:
        """The user's last memory event id (0 for none)."""
        uid = await self.db._uid(user_key)
        if uid is None:
            return 0
        rows = await self.db._fetch(
            "SELECT coalesce(max(id), 0) FROM memory_events WHERE uid = $1", uid
        )
        return int(rows[0][0])

    async def embedding_version(self, *, user_key: str, model: str) -> tuple[int, int, int]:
        """(last memory event id, active memories, those embedded by ``model``) of the user."""
        uid = await self.db._uid(user_key)
        if uid is None:
            return (0, 0, 0)
        rows = await self.db._fetch(
            "SELECT (SELECT coalesce(max(id), 0) FROM memory_events WHERE uid = $1),"
            " count(m.id), count(e.memory_id) FROM memories m"
            " LEFT JOIN memory_embeddings e ON e.memory_id = m.id AND e.model = $2"
            " WHERE m.uid = $1 AND m.superseded_by IS NULL",
            uid,
            model,
        )
        return (int(rows[0][0]), int(rows[0][1]), int(rows[0][2]))
