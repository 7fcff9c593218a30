"""Hybrid recall: BM25 and embedding cosine candidates fused by reciprocal rank fusion.

:class:`HybridStore` wraps any :class:`core.store.seams.Store` (the decorator pattern): every write
that adds memories (remember, import, reflection, cleanup merges) also stores their
embeddings, and ``search`` - the recall seam, same signature - fuses two ranked lists:

- BM25 candidates from the wrapped store (its own per-user BM25);
- cosine-similarity candidates over the user's active memories' embeddings;

with reciprocal rank fusion, ``score(d) = sum over lists of 1 / (RRF_K + rank(d))``,
``RRF_K = 60`` (Cormack, Clarke and Buettcher, "Reciprocal rank fusion outperforms Condorcet
and individual rank learning methods", SIGIR 2009). Each list contributes its top ``k`` (the
rank window; Elasticsearch's RRF retriever also defaults its window to the requested size):
a memory far down one list gains nothing from that list.

A user's embedding matrix is cached in memory after the first recall (float32, 384 values a
memory: 1.5 MB per 1,000 memories) and dropped whenever that user's memories change; at most
``cache_users`` users are cached (least recently used first out).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from core.memory.embeddings import Embedder
from core.rules.cleanup_ops import AppliedChange, ChangeOp
from core.rules.dedupe import Deduper
from core.store.seams import Store
from core.types import AddResult, NewMemory, Origin, ScoredMemory

logger = logging.getLogger(__name__)

RRF_K = 60
"""Reciprocal rank fusion constant (Cormack, Clarke and Buettcher, SIGIR 2009)."""


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """Fused scores of the ids in ``rankings`` (each best first): ``sum 1 / (k + rank)``,
    ranks counted from 1."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return fused


class _UserMatrix:
    def __init__(self, rows: list[tuple[int, Origin, bytes]]) -> None:
        self.ids = np.array([r[0] for r in rows], dtype=np.int64)
        self.origins = np.array([r[1] for r in rows])
        self.matrix: npt.NDArray[np.float32] = (
            np.vstack([np.frombuffer(r[2], dtype=np.float32) for r in rows])
            if rows
            else np.zeros((0, 0), dtype=np.float32)
        )


class HybridStore:
    """A :class:`core.store.seams.Store` whose recall fuses BM25 with embedding similarity."""

    def __init__(self, inner: Store, embedder: Embedder, *, cache_users: int = 64) -> None:
        self.inner = inner
        self.embedder = embedder
        self.cache_users = cache_users
        self._cache: OrderedDict[str, _UserMatrix] = OrderedDict()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _drop(self, user_key: str) -> None:
        self._cache.pop(user_key, None)

    async def _index(self, user_key: str, pairs: Sequence[tuple[int, str]]) -> None:
        if not pairs:
            return
        vectors = await self.embedder.embed([text for _, text in pairs])
        await self.inner.put_embeddings(
            user_key=user_key,
            model=self.embedder.name,
            items=[(i, v.tobytes()) for (i, _), v in zip(pairs, vectors, strict=True)],
        )
        self._drop(user_key)

    # --- writes: the wrapped store, then the new memories' embeddings
    async def add(
        self, *, user_key: str, memory: NewMemory, dedupe: Deduper, supersedes: Sequence[int] = ()
    ) -> AddResult:
        result = await self.inner.add(
            user_key=user_key, memory=memory, dedupe=dedupe, supersedes=supersedes
        )
        if result.status == "added":
            await self._index(user_key, [(result.id, memory.text)])
        self._drop(user_key)
        return result

    async def add_many(
        self, *, user_key: str, memories: Sequence[NewMemory], dedupe: Deduper | None
    ) -> list[AddResult]:
        results = await self.inner.add_many(user_key=user_key, memories=memories, dedupe=dedupe)
        await self._index(
            user_key,
            [(r.id, m.text) for r, m in zip(results, memories, strict=True) if r.status == "added"],
        )
        return results

    async def apply_change(
        self, *, user_key: str, change_id: str, ops: Sequence[ChangeOp]
    ) -> AppliedChange:
        applied = await self.inner.apply_change(user_key=user_key, change_id=change_id, ops=ops)
        pairs = []
        for memory_id in applied.added:
            memory = await self.inner.get(user_key=user_key, memory_id=memory_id)
            if memory is not None:
                pairs.append((memory_id, memory.text))
        await self._index(user_key, pairs)
        self._drop(user_key)
        return applied

    async def undo_change(self, *, user_key: str, change_id: str) -> int:
        self._drop(user_key)
        return await self.inner.undo_change(user_key=user_key, change_id=change_id)

    async def supersede(
        self, *, user_key: str, old_id: int, new_id: int, conversation_key: str | None = None
    ) -> bool:
        self._drop(user_key)
        return await self.inner.supersede(
            user_key=user_key, old_id=old_id, new_id=new_id, conversation_key=conversation_key
        )

    async def forget(self, *, user_key: str, memory_id: int) -> bool:
        self._drop(user_key)
        return await self.inner.forget(user_key=user_key, memory_id=memory_id)

    async def forget_all(self, *, user_key: str) -> int:
        self._drop(user_key)
        return await self.inner.forget_all(user_key=user_key)

    async def reindex(self, *, user_key: str | None = None, batch: int = 256) -> int:
        """Embed every active memory that has no embedding from this model; returns count."""
        done = 0
        while True:
            missing = await self.inner.memories_without_embedding(
                model=self.embedder.name, user_key=user_key, limit=batch
            )
            if not missing:
                return done
            by_user: dict[str, list[tuple[int, str]]] = {}
            for key, memory_id, text in missing:
                by_user.setdefault(key, []).append((memory_id, text))
            for key, pairs in by_user.items():
                await self._index(key, pairs)
                done += len(pairs)

    # --- recall
    async def _matrix(self, user_key: str) -> _UserMatrix:
        cached = self._cache.get(user_key)
        if cached is not None:
            self._cache.move_to_end(user_key)
            return cached
        rows = await self.inner.active_embeddings(user_key=user_key, model=self.embedder.name)
        matrix = _UserMatrix(rows)
        self._cache[user_key] = matrix
        while len(self._cache) > self.cache_users:
            self._cache.popitem(last=False)
        return matrix

    async def search(
        self, *, user_key: str, query: str, k: int, origins: Sequence[Origin] | None = None
    ) -> list[ScoredMemory]:
        """Hybrid recall, best first, at most ``k``; same contract as the wrapped store."""
        if k <= 0 or (origins is not None and not origins):
            return []
        window = k
        bm25 = await self.inner.search(user_key=user_key, query=query, k=window, origins=origins)
        cosine: list[int] = []
        data = await self._matrix(user_key)
        if query.strip() and len(data.ids):
            vector = (await self.embedder.embed([query[:2000]]))[0]
            sims = data.matrix @ vector
            if origins is not None:
                sims = np.where(np.isin(data.origins, list(origins)), sims, -np.inf)
            top = np.argsort(-sims)[:window]
            cosine = [int(data.ids[i]) for i in top if np.isfinite(sims[i])]
        fused = rrf([[s.memory.id for s in bm25], cosine])
        best = sorted(fused, key=lambda i: (-fused[i], -i))[:k]
        known = {s.memory.id: s.memory for s in bm25}
        out = []
        for memory_id in best:
            memory = known.get(memory_id) or await self.inner.get(
                user_key=user_key, memory_id=memory_id
            )
            if memory is not None and memory.active:
                out.append(ScoredMemory(memory=memory, score=fused[memory_id]))
        return out
