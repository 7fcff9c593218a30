"""The recall seam: what the turn loop, reflection and the memory commands ask for memories.

:class:`Recaller` is the seam; :class:`BM25Recaller` is the default (the store's own per-user
BM25, ``top_k = 6`` in the loop) and :class:`core.memory.hybrid.HybridRecaller` fuses it with
embedding similarity. The factory choosing one from the settings is
:func:`core.runtime.open_recaller`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.types import ScoredMemory


class Recaller(Protocol):
    """Ranked recall over one user's active memories."""

    async def recall(
        self, *, user_key: str, query: str, k: int, reach: Sequence[str] | None = None
    ) -> list[ScoredMemory]:
        """At most ``k`` of the user's active memories, best first (never another user's).

        Any text is a valid query (empty, unicode, query syntax); ``reach`` keeps memories
        usable where the question was asked (the place rule's tokens,
        :func:`core.rules.places.usable_reaches`; None: all), an empty sequence finds nothing.
        """
        ...


class MemorySearch(Protocol):
    """The store's BM25 search (:meth:`core.store.seams.MemoryStore.search`)."""

    async def search(
        self, *, user_key: str, query: str, k: int, reach: Sequence[str] | None = None
    ) -> list[ScoredMemory]: ...


class BM25Recaller:
    """:class:`Recaller` over the store's BM25 search (scores: BM25, higher is better)."""

    def __init__(self, store: MemorySearch) -> None:
        self.store = store

    async def recall(
        self, *, user_key: str, query: str, k: int, reach: Sequence[str] | None = None
    ) -> list[ScoredMemory]:
        return await self.store.search(user_key=user_key, query=query, k=k, reach=reach)
