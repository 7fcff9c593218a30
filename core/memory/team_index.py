"""A busy channel's entries as an in-process BM25 index (team memory, :mod:`core.memory.team`).

Every answer in a channel whose memory is on recalls over the channel's entries. Through the
store that is one full-text query a turn (SQLite: FTS5 ``bm25()`` over every entry holding a
query word, the vocabulary's document counts, the re-scoring; about 1.3 ms of CPU a turn for
300 entries, the largest part of what channel memory cost a turn in ``bench/load.py
--channels``). A channel's entries change seldom (its revision, read on every message, says
when), so :class:`ChannelIndex` holds them, read once a revision, and scores a query in
Python: the same Okapi BM25 as the stores (:mod:`core.rules.bm25`: the same terms, document
frequencies, lengths and float sums in the same order, ties to the newer entry), over every
entry rather than the stores' candidate pool.

Bounded: only a channel of at most :data:`INDEXED_ENTRIES` entries is indexed (a larger one is
recalled through the store), and the index of each term of an entry is made once per entry
(:class:`TermCache`), not once a revision.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from core.rules.bm25 import BM25_B, BM25_K1, bm25_idf
from core.rules.text import index_terms, query_terms
from core.types import Memory, ScoredMemory

INDEXED_ENTRIES = 1000
"""The most entries a channel may hold for its entries to be indexed in the process (about
1 KB each); a larger channel is recalled through the store."""
KEPT_INDEXES = 64
"""The most channels whose index is kept (the busiest: the least recently read goes)."""


class TermCache:
    """The index terms of each entry (by id and text), made once per entry."""

    def __init__(self) -> None:
        self._terms: dict[tuple[int, str], Counter[str]] = {}

    def terms(self, memory: Memory) -> Counter[str]:
        key = (memory.id, memory.text)
        found = self._terms.get(key)
        if found is None:
            found = self._terms[key] = Counter(index_terms(0, memory.text))
        return found

    def keep_only(self, memories: Collection[Memory]) -> None:
        """Forget the terms of entries no longer among ``memories``."""
        alive = {(m.id, m.text) for m in memories}
        for key in [k for k in self._terms if k not in alive]:
            del self._terms[key]


def _post(
    postings: dict[str, list[tuple[int, int]]],
    memories: Sequence[Memory],
    first: int,
    cache: TermCache,
) -> list[int]:
    """Add the postings of ``memories`` (at positions ``first``, ``first + 1``..) to
    ``postings``; returns each one's number of index terms."""
    lengths = []
    for position, memory in enumerate(memories, start=first):
        count = cache.terms(memory)
        lengths.append(sum(count.values()))
        for term, f in count.items():
            postings.setdefault(term, []).append((position, f))
    return lengths


def _norms(lengths: Sequence[int]) -> tuple[float, ...]:
    """BM25's length normalisation of each entry (:mod:`core.rules.bm25`'s k1 and b)."""
    total = sum(lengths)
    avgdl = total / len(lengths) if lengths and total else 1.0
    return tuple(BM25_K1 * (1 - BM25_B + BM25_B * n / avgdl) for n in lengths)


@dataclass(frozen=True, slots=True)
class ChannelIndex:
    """One revision of a channel's active entries, for BM25 recall (:meth:`search`)."""

    memories: tuple[Memory, ...]
    postings: dict[str, list[tuple[int, int]]]  # term -> (position, count in that entry)
    norms: tuple[float, ...]  # BM25's length normalisation of each entry
    lengths: tuple[int, ...] = ()  # each entry's index terms

    @classmethod
    def build(cls, memories: Sequence[Memory], cache: TermCache) -> ChannelIndex:
        """The index of ``memories`` (every active entry of the channel)."""
        postings: dict[str, list[tuple[int, int]]] = {}
        lengths = _post(postings, memories, 0, cache)
        return cls(tuple(memories), postings, _norms(lengths), tuple(lengths))

    def extended(self, memories: Sequence[Memory], cache: TermCache) -> ChannelIndex | None:
        """The index of ``memories`` (every active entry of the channel at a new revision)
        made from this one when it holds only entries still among them: the new entries'
        postings added, the lengths' normalisation made again (the average changed), the
        postings of a term no new entry holds shared with this index (never changed in
        place). None when an entry of this index is gone (then :meth:`build`). Its
        :meth:`search` answers as the index :meth:`build` makes of the same entries: the
        same postings per entry, the same sums."""
        known = {m.id for m in self.memories}
        added = [m for m in memories if m.id not in known]
        if len(memories) - len(added) != len(self.memories):
            return None  # an entry is gone (or listed twice): read whole
        if not added:
            return self
        fresh: dict[str, list[tuple[int, int]]] = {}
        lengths = (*self.lengths, *_post(fresh, added, len(self.memories), cache))
        postings = dict(self.postings)
        for term, found in fresh.items():
            postings[term] = [*postings.get(term, ()), *found]
        return ChannelIndex((*self.memories, *added), postings, _norms(lengths), lengths)

    def search(self, query: str, *, k: int, skip: Collection[int] = ()) -> list[ScoredMemory]:
        """The ``k`` entries (not those whose id is in ``skip``) best matching ``query`` by
        BM25, best first (ties: the newer entry first); as the stores' ``search`` scores
        them (:func:`core.rules.bm25.rescore`), over every entry."""
        if k <= 0:
            return []
        n_docs = len(self.memories)
        scores: dict[int, float] = {}
        # Terms in sorted order: each entry's sum in the order rescore adds it.
        for term in sorted(set(query_terms(0, query))):
            found = self.postings.get(term)
            if not found:
                continue
            weight = bm25_idf(n_docs, len(found))
            for position, f in found:
                scores[position] = scores.get(position, 0.0) + weight * f * (BM25_K1 + 1) / (
                    f + self.norms[position]
                )
        memories = self.memories
        ranked = (
            (score, memories[position].id, position)
            for position, score in scores.items()
            if memories[position].id not in skip
        )
        best = heapq.nsmallest(k, ranked, key=lambda s: (-s[0], -s[1]))
        return [ScoredMemory(memory=memories[p], score=score) for score, _, p in best]
