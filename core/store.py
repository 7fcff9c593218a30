"""The memory store seam and its factory.

Every method is scoped to one ``user_key`` (``slack:T1:U1``, ``discord:42``, ``cli:alice``):
no method reads, ranks or deletes another user's rows. Backends: SQLite
(:mod:`core.sqlite_store`, the embedded default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.dedupe import Deduper
from core.errors import ConfigError
from core.models import AddResult, Memory, MemoryEvent, MemoryStats, NewMemory, Origin, ScoredMemory


class MemoryStore(Protocol):
    """Persistent per-user memories, their history, and BM25 recall."""

    async def add(
        self, *, user_key: str, memory: NewMemory, dedupe: Deduper, supersedes: Sequence[int] = ()
    ) -> AddResult:
        """Write ``memory`` unless ``dedupe`` finds it among the user's active memories.

        ``supersedes`` names the user's memories the new one replaces (ignored when the new
        one is a duplicate; ids of other users are ignored). Atomic.
        """
        ...

    async def add_many(
        self, *, user_key: str, memories: Sequence[NewMemory], dedupe: Deduper | None
    ) -> list[AddResult]:
        """Write several memories in one transaction, each deduped against all before it.

        ``dedupe=None`` (trusted bulk loads) skips only exact duplicates.
        """
        ...

    async def get(self, *, user_key: str, memory_id: int) -> Memory | None:
        """The user's memory with this id (active or superseded), or None."""
        ...

    async def list_memories(
        self, *, user_key: str, limit: int = 20, offset: int = 0, include_superseded: bool = False
    ) -> list[Memory]:
        """The user's memories, newest first."""
        ...

    async def count(self, *, user_key: str) -> int:
        """Number of the user's active memories."""
        ...

    async def search(
        self, *, user_key: str, query: str, k: int, origins: Sequence[Origin] | None = None
    ) -> list[ScoredMemory]:
        """BM25 recall over the user's active memories, best first, at most ``k``.

        Any text is a valid query; ``origins`` restricts to memories learned there.
        """
        ...

    async def supersede(
        self, *, user_key: str, old_id: int, new_id: int, conversation_key: str | None = None
    ) -> bool:
        """Mark ``old_id`` superseded by ``new_id``; False when either is not the user's."""
        ...

    async def forget(self, *, user_key: str, memory_id: int) -> bool:
        """Erase one memory's text; only its id and a ``forgotten`` event remain."""
        ...

    async def forget_all(self, *, user_key: str) -> int:
        """Erase all of the user's memories and conversation history; returns memories erased."""
        ...

    async def history(self, *, user_key: str, limit: int = 1000) -> list[MemoryEvent]:
        """The user's memory events, oldest first."""
        ...

    async def stats(self, *, user_key: str | None = None) -> MemoryStats:
        """Counts of active memories, for one user or for the whole store."""
        ...

    async def export(self, *, user_key: str) -> list[Memory]:
        """All of the user's active memories, oldest first."""
        ...

    async def close(self) -> None:
        """Flush and close."""
        ...


async def open_store(url: str) -> MemoryStore:
    """Open (creating and migrating) the store named by a ``sqlite:///`` URL.

    Raises ``ConfigError`` for other schemes, ``StoreError`` when the file cannot be opened.
    """
    if url.startswith("sqlite:///"):
        from core.sqlite_store import SQLiteStore

        return await SQLiteStore.open(url.removeprefix("sqlite:///"))
    raise ConfigError(f"SELFMIND_DB: no store for {url.split('://', 1)[0]!r} URLs yet")
