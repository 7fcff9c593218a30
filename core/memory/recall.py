"""The recall seam: what the turn loop, reflection and the memory commands ask for memories.

:class:`Recaller` is the seam; :class:`BM25Recaller` is the default (the store's own per-user
BM25, ``top_k = 6`` in the loop) and :class:`core.memory.hybrid.HybridRecaller` fuses it with
embedding similarity. The factory choosing one from the settings is
:func:`core.runtime.open_recaller`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.rules.text import STOP_WORDS, words
from core.types import Origin, ScoredMemory


class Recaller(Protocol):
    """Ranked recall over one user's active memories."""

    async def recall(
        self, *, user_key: str, query: str, k: int, origins: Sequence[Origin] | None = None
    ) -> list[ScoredMemory]:
        """At most ``k`` of the user's active memories, best first (never another user's).

        Any text is a valid query (empty, unicode, query syntax); ``origins`` restricts to
        memories learned there (``["shared"]`` in a channel), an empty sequence finds nothing.
        """
        ...


class MemorySearch(Protocol):
    """The store's BM25 search (:meth:`core.store.seams.MemoryStore.search`)."""

    async def search(
        self, *, user_key: str, query: str, k: int, origins: Sequence[Origin] | None = None
    ) -> list[ScoredMemory]: ...


class BM25Recaller:
    """:class:`Recaller` over the store's BM25 search (scores: BM25, higher is better)."""

    def __init__(self, store: MemorySearch) -> None:
        self.store = store

    async def recall(
        self, *, user_key: str, query: str, k: int, origins: Sequence[Origin] | None = None
    ) -> list[ScoredMemory]:
        return await self.store.search(user_key=user_key, query=query, k=k, origins=origins)


LEANING_WORDS = frozenset(
    """he him his she her hers it its they them their theirs that this those these one ones
    other there then same also too else""".split()
)
"""Words that point back at something said before ("and the other one?", "what about
her?"): a message holding one leans on the conversation."""
LEANING_OPENERS = ("and ", "what about", "how about", "also ", "same ", "or ")
SHORT_MESSAGE_WORDS = 4
"""A message of at most this many content words leans on the conversation too ("why?",
"is it worth fixing?")."""


def recall_query(text: str, previous_user_text: str | None) -> str:
    """The text recall searches for ``text``, the user's message in a thread whose previous
    user message was ``previous_user_text`` (None: none).

    A message that leans on the conversation (it opens with "and", "what about", "how
    about", ..., holds a pointing word of :data:`LEANING_WORDS`, or has at most
    :data:`SHORT_MESSAGE_WORDS` content words) is searched together with the previous user
    message, which names what it points at; any other message is searched as it is."""
    if not previous_user_text or not previous_user_text.strip():
        return text
    tokens = words(text)
    content = [w for w in tokens if w not in STOP_WORDS]
    lowered = " ".join(tokens)
    if (
        len(content) <= SHORT_MESSAGE_WORDS
        or lowered.startswith(LEANING_OPENERS)
        or any(w in LEANING_WORDS for w in tokens)
    ):
        return f"{previous_user_text}\n{text}"
    return text
