"""Recall that fuses BM25 with embedding similarity: the default and the semantic extra.

:class:`HybridRecaller` is a :class:`core.memory.recall.Recaller` over two rankings,

- BM25 candidates from the store's own per-user BM25 search (the first stage);
- cosine similarity over the user's active memories' embeddings.

The default recall (``SELFMIND_RECALL=static``) embeds with static word vectors
(:mod:`core.memory.static`), adds the fact words of :mod:`core.rules.expand` to the query it
embeds (each memory keeps its best cosine over the query and its expansions), and fuses by
score: ``bm25 / best bm25 + COSINE_WEIGHT * cosine`` over BM25's top ``SCORE_WINDOW * k``
and every memory's cosine. The semantic extra (``hybrid``) embeds with
MiniLM and fuses by reciprocal rank fusion, ``score(d) = sum over lists of 1 / (RRF_K + rank(d))``,
``RRF_K = 60`` (Cormack, Clarke and Buettcher, "Reciprocal rank fusion outperforms Condorcet
and individual rank learning methods", SIGIR 2009). Each list contributes its top ``k`` (the
rank window; Elasticsearch's RRF retriever also defaults its window to the requested size):
a memory far down one list gains nothing from that list.

A query that names days ("What did I cook on 9 November, 2022?", "in May 2023";
:mod:`core.rules.when`) puts the memories stored on those days (a day before to three after)
first, ranked among themselves by the same fusion; the rest follow as before. The words of a
date seldom appear in the memory they ask for: its day is what it keeps of the time.

Embeddings are made at recall: before ranking, the user's active memories that have no
embedding from this model yet (remembered, imported, learned by reflection or merged by a
cleanup since the last recall, here or in another process) are embedded and stored. A user's
embedding matrix is cached in memory (float32, 384 values a memory: 1.5 MB per 1,000
memories) and used as long as the user's last memory event id (the first part of
:meth:`core.store.seams.VectorStore.embedding_version`, read alone as ``memory_head``: one
indexed read per recall) is the one it was built at; at most ``cache_users`` users are
cached (least recently used first out). The cache is per process; the event id makes it
correct across processes. It never comes back to an earlier value: memory events are only
ever appended (a forget, ``forget all`` too, appends its own), so whatever a user is taught
after forgetting moves it past every id a matrix was built at.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import date
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from core.memory.embeddings import Embedder
from core.rules.bm25 import candidate_pool
from core.rules.expand import expansions
from core.rules.when import stored_spans
from core.types import Memory, ScoredMemory

logger = logging.getLogger(__name__)

RRF_K = 60
"""Reciprocal rank fusion constant (Cormack, Clarke and Buettcher, SIGIR 2009)."""
COSINE_WEIGHT = 2.0
"""Score fusion: ``bm25 / best bm25 + COSINE_WEIGHT * cosine`` (bench/use.py chose it)."""
SCORE_WINDOW = 2
"""Score fusion reads BM25's top ``SCORE_WINDOW * k``."""
DATED_FIRST = 10.0
"""Added to the fused score of the memories stored on the days a query names
(:func:`core.rules.when.stored_spans`): above any other fused score (score fusion's are at
most ``1 + COSINE_WEIGHT``, reciprocal rank's below 1), so they come first, in their own
fused order."""

Fusion = Literal["rrf", "score"]


def score_fusion(
    bm25: Sequence[ScoredMemory],
    ids: npt.NDArray[np.int64],
    sims: npt.NDArray[np.float32],
    k: int,
    first: npt.NDArray[np.bool_] | None = None,
) -> dict[int, float]:
    """The ``k`` best fused scores: each memory's cosine ``sims`` (aligned with ``ids``,
    ascending; ``-inf`` = not allowed here) times :data:`COSINE_WEIGHT`, plus its BM25 score
    over the best one's (0 outside the BM25 list), plus :data:`DATED_FIRST` where ``first``
    (aligned with ``ids``: stored on the days the query names). A memory only in the BM25
    list (no vector yet) gets its BM25 part alone. Vectorised: a 10,000-memory user costs
    well under 1 ms."""
    best = max((s.score for s in bm25), default=0.0)
    lexical = {s.memory.id: s.score / best if best > 0 else 0.0 for s in bm25}
    fused = COSINE_WEIGHT * sims.astype(np.float64)
    if first is not None:
        fused += DATED_FIRST * first
    outside: dict[int, float] = {}
    if lexical:
        wanted = np.fromiter(lexical, dtype=np.int64, count=len(lexical))
        at = np.searchsorted(ids, wanted).clip(max=max(len(ids) - 1, 0))
        for memory_id, pos in zip(wanted.tolist(), at.tolist(), strict=True):
            if len(ids) and ids[pos] == memory_id and np.isfinite(fused[pos]):
                fused[pos] += lexical[memory_id]
            else:
                outside[memory_id] = lexical[memory_id]
    top = np.argsort(-fused)[:k] if len(fused) <= k else np.argpartition(-fused, k)[:k]
    out = {int(ids[i]): float(fused[i]) for i in top.tolist() if np.isfinite(fused[i])}
    out.update(outside)
    return out


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """Fused scores of the ids in ``rankings`` (each best first): ``sum 1 / (k + rank)``,
    ranks counted from 1."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return fused


class _UserMatrix:
    """One user's vectors, kept transposed: ``columns`` is ``(dim, memories)``, C-contiguous,
    column ``j`` the vector of ``ids[j]`` (:func:`cosines` reads it): one vector's products
    took 0.4 against 1.0 ms for the row-major matrix at 10,000 x 256, with the matrix out of
    the CPU's cache as it is between turns (bench/use.py)."""

    def __init__(self, rows: list[tuple[int, str, bytes, str]]) -> None:
        self.ids = np.array([r[0] for r in rows], dtype=np.int64)
        # Each memory's reach token as a code into ``reach_names`` (its distinct tokens): the
        # place rule's mask is a lookup, 7 against 140 us for np.isin over 10,000 strings.
        names, codes = np.unique(np.array([r[1] for r in rows], dtype=str), return_inverse=True)
        self.reach_names: list[str] = names.tolist()
        self.reach_codes: npt.NDArray[np.intp] = codes.reshape(-1)
        # The UTC day each was stored, as days since 1970-01-01 (numpy parses the ISO days
        # of 10,000 memories in under 2 ms).
        self.days = np.array([r[3] for r in rows], dtype="datetime64[D]").astype(np.int64)
        self.columns: npt.NDArray[np.float32] = (
            np.ascontiguousarray(np.vstack([np.frombuffer(r[2], dtype=np.float32) for r in rows]).T)
            if rows
            else np.zeros((0, 0), dtype=np.float32)
        )


COSINE_BLOCK = 1024
"""Memories a query's vectors are multiplied with at a time when it has several
(:func:`cosines`): 1 MB of a 256-dimension matrix stays in a core's L2 cache (2 MB on the
machines measured) for the second vector on, where the whole 10 MB matrix is read from
memory (or L3) once per vector."""


def cosines(
    vectors: npt.NDArray[np.float32], columns: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Each memory's best cosine over the query ``vectors`` (``(texts, dim)``, L2-normalised)
    against ``columns`` (:class:`_UserMatrix`), shape ``(memories,)`` float32.

    One matrix-vector product (BLAS ``sgemv``) per vector, the running maximum kept in place,
    not one matrix product: OpenBLAS's ``sgemm`` packs (copies) the whole 10 MB matrix on
    each call, which cost more than the products themselves. 10,000 x 256, one thread:
    two vectors 0.28 against 0.56 ms with the matrix in the CPU's cache and 0.66 against
    1.32 ms out of it, four 0.57 against 0.64 and 1.12 against 1.53 ms. A query with its
    expansions (two vectors or more; 135 of the 300 LoCoMo questions of bench/use.py, 28
    with three or four) is multiplied :data:`COSINE_BLOCK` memories at a time, every vector
    on a block before the next block: 10,000 x 256 on a 2-core Xeon, two vectors 0.54
    against 0.72 ms, three 0.71 against 1.09, four 0.82 against 1.46. A one-vector query,
    and any query of a user with at most :data:`COSINE_BLOCK` memories, gets the ``sgemv``
    cosines of the whole matrix; a block's ``sgemv`` may round a few cosines of a larger
    matrix otherwise (OpenBLAS blocks the rows of its own accord), up to 8e-6 apart."""
    memories = columns.shape[1]
    if len(vectors) == 1 or memories <= COSINE_BLOCK:
        sims: npt.NDArray[np.float32] = vectors[0] @ columns
        for vector in vectors[1:]:
            np.maximum(sims, vector @ columns, out=sims)
        return sims
    sims = np.empty(memories, dtype=np.float32)
    for start in range(0, memories, COSINE_BLOCK):
        block = columns[:, start : start + COSINE_BLOCK]
        best = sims[start : start + COSINE_BLOCK]
        np.matmul(vectors[0], block, out=best)
        for vector in vectors[1:]:
            np.maximum(best, vector @ block, out=best)
    return sims


def usable(data: _UserMatrix, reach: Sequence[str]) -> npt.NDArray[np.bool_]:
    """Which of the user's memories (aligned with ``data.ids``) have one of the ``reach``
    tokens: the place rule, as the store applies it to BM25."""
    wanted = set(reach)
    allowed = np.array([name in wanted for name in data.reach_names], dtype=np.bool_)
    return allowed[data.reach_codes]


_EPOCH = date(1970, 1, 1).toordinal()


def dated(data: _UserMatrix, query: str) -> npt.NDArray[np.bool_] | None:
    """Which of the user's memories were stored on the days ``query`` names (aligned with
    ``data.ids``; :func:`core.rules.when.stored_spans`), or None when it names none."""
    spans = stored_spans(query)
    if not spans:
        return None
    mask = np.zeros(len(data.ids), dtype=np.bool_)
    for start, end in spans:
        first, last = (day.toordinal() - _EPOCH for day in (start, end))
        mask |= (data.days >= first) & (data.days <= last)
    return mask if mask.any() else None


class HybridSource(Protocol):
    """What hybrid recall reads and writes in the store (parts of its memory and vector
    seams)."""

    async def search(
        self,
        *,
        user_key: str,
        query: str,
        k: int,
        reach: Sequence[str] | None = None,
        pool: int | None = None,
    ) -> list[ScoredMemory]: ...

    async def get(self, *, user_key: str, memory_id: int) -> Memory | None: ...

    async def put_embeddings(
        self, *, user_key: str, model: str, items: Sequence[tuple[int, bytes]]
    ) -> int: ...

    async def active_embeddings(
        self, *, user_key: str, model: str
    ) -> list[tuple[int, str, bytes, str]]: ...

    async def memories_without_embedding(
        self, *, model: str, user_key: str | None = None, limit: int = 256
    ) -> list[tuple[str, int, str]]: ...

    async def embedding_version(self, *, user_key: str, model: str) -> tuple[int, int, int]: ...

    async def memory_head(self, *, user_key: str) -> int: ...


class HybridRecaller:
    """A :class:`core.memory.recall.Recaller` fusing BM25 with embedding similarity."""

    def __init__(
        self,
        store: HybridSource,
        embedder: Embedder,
        *,
        cache_users: int = 64,
        fusion: Fusion = "rrf",
        expand: bool = False,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.cache_users = cache_users
        self.fusion: Fusion = fusion
        self.expand = expand
        self._cache: OrderedDict[str, tuple[int, _UserMatrix]] = OrderedDict()

    async def _index(self, user_key: str, pairs: Sequence[tuple[int, str]]) -> None:
        if not pairs:
            return
        vectors = await self.embedder.embed([text for _, text in pairs])
        await self.store.put_embeddings(
            user_key=user_key,
            model=self.embedder.name,
            items=[(i, v.tobytes()) for (i, _), v in zip(pairs, vectors, strict=True)],
        )

    async def reindex(
        self, *, user_key: str | None = None, batch: int = 256, limit: int | None = None
    ) -> int:
        """Embed every active memory (of one user, or all) that has no embedding from this
        model, ``batch`` texts at a time, at most about ``limit`` (None: all); returns how
        many were embedded."""
        done = 0
        while limit is None or done < limit:
            missing = await self.store.memories_without_embedding(
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
        return done

    # --- recall
    async def _matrix(self, user_key: str) -> _UserMatrix:
        model = self.embedder.name
        cached = self._cache.get(user_key)
        if cached is not None and cached[0] == await self.store.memory_head(user_key=user_key):
            # Nothing changed since it was built. Put back, not moved: while the head was
            # read, other users' recalls may have pushed this one out of the cache.
            self._cache[user_key] = cached
            self._cache.move_to_end(user_key)
            self._trim()
            return cached[1]
        version = await self.store.embedding_version(user_key=user_key, model=model)
        if version[2] < version[1]:  # active memories without an embedding: make them
            await self.reindex(user_key=user_key)
        rows = await self.store.active_embeddings(user_key=user_key, model=model)
        matrix = _UserMatrix(rows)
        self._cache[user_key] = (version[0], matrix)
        self._cache.move_to_end(user_key)
        self._trim()
        return matrix

    def _trim(self) -> None:
        while len(self._cache) > self.cache_users:
            self._cache.popitem(last=False)

    async def recall(
        self, *, user_key: str, query: str, k: int, reach: Sequence[str] | None = None
    ) -> list[ScoredMemory]:
        """Hybrid recall, best first, at most ``k`` (scores: the fused score, higher is
        better); the contract of :meth:`core.memory.recall.Recaller.recall`."""
        if k <= 0 or (reach is not None and not reach):
            return []
        window = k if self.fusion == "rrf" else SCORE_WINDOW * k
        ids: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        sims: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        data = await self._matrix(user_key)
        # The BM25 search runs on the store's side (SQLite: its reader thread; PostgreSQL:
        # the server) while the cosines are taken here: the two overlap, and a recall takes
        # about the longer of them, not their sum (bench/use.py, Use).
        # The deeper list comes from the candidates a top k re-scores: twice the pool cost
        # about 0.6 ms more CPU a recall at 10,000 memories and changed no LoCoMo hit.
        search = asyncio.ensure_future(
            self.store.search(
                user_key=user_key, query=query, k=window, reach=reach, pool=candidate_pool(k)
            )
        )
        try:
            await asyncio.sleep(0)  # let the search reach its thread before the CPU work
            if query.strip() and len(data.ids):
                text = query[:2000]
                texts = [text] + ([f"{text} {e}" for e in expansions(text)] if self.expand else [])
                vectors = await self.embedder.embed(texts)
                sims = cosines(vectors, data.columns)
                if reach is not None:  # the place rule, as the store applies it to BM25
                    sims = np.where(usable(data, reach), sims, -np.inf)
                ids = data.ids
            first = dated(data, query) if len(ids) else None
        except BaseException:
            search.cancel()
            await asyncio.gather(search, return_exceptions=True)
            raise
        bm25 = await search
        if self.fusion == "rrf":
            top = np.argsort(-sims)[:window]
            cosine = [int(ids[i]) for i in top if np.isfinite(sims[i])]
            lexical = [s.memory.id for s in bm25]
            fused = rrf([lexical, cosine])
            if first is not None:
                # The named days' memories first, by the same fusion over them alone.
                at = np.flatnonzero(first & np.isfinite(sims))
                on_days = set(ids[at].tolist())
                by_cosine = ids[at[np.argsort(-sims[at])][:window]].tolist()
                for i, score in rrf([[i for i in lexical if i in on_days], by_cosine]).items():
                    fused[i] = DATED_FIRST + score
        else:
            fused = score_fusion(bm25, ids, sims, k, first)
        best = sorted(fused, key=lambda i: (-fused[i], -i))[:k]
        known = {s.memory.id: s.memory for s in bm25}
        unknown = [i for i in best if i not in known]
        # Read together: queued on the store's connection at once, not one round trip each.
        read = await asyncio.gather(
            *(self.store.get(user_key=user_key, memory_id=i) for i in unknown)
        )
        known.update((m.id, m) for m in read if m is not None)
        return [
            ScoredMemory(memory=memory, score=fused[i])
            for i in best
            if (memory := known.get(i)) is not None and memory.active
        ]
