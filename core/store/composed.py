"""A backend as a set of parts: the shape every store class takes, written once.

A backend is its connection and four parts, each an object holding that connection (never
a base class of the store):

- the **connection** (:class:`core.store.sqlite.base.SQLiteBase`,
  :class:`core.store.postgres.base.PostgresBase`): open, migrate, close, its transactions, and
  the two hooks the shared rules write through, ``_run_statements``
  (:class:`core.store.statements.StatementHook`) and ``_transact``
  (:meth:`core.store.memories.MemoryRules._transact`). The store class IS its connection
  (it derives from it), so the hooks, ``migrated`` and ``close`` are the store's own;
- **conversations** (:class:`ConversationPart`): turns, the reflection queue, claims, modes,
  usage, feedback and pending actions, the statement-only writes among them being
  :class:`core.store.statements.StatementRules` over the connection's ``_run_statements``;
- **channels** (:class:`core.store.channels.ChannelStore`): a channel's own memory, its
  shared writes :class:`core.store.channels.ChannelRules`;
- **vectors** (:class:`core.store.seams.VectorStore`): embeddings for hybrid recall;
- **recall log** (:class:`core.store.seams.RecallReads`): how each memory was used.

The store class names its part classes (:class:`Parts`), holds the memory reads (``get``,
``list_memories``, ``search``, ``users``, ...) and derives from :class:`ComposedStore`, which
makes its parts and gives it the memory rules (:class:`core.store.memories.MemoryRules`, over
the backend's ``_transact`` and :class:`core.store.memories.MemoryTx`) and the flat method
names of :class:`core.store.seams.Store` (``store.add_turn``, ``store.see_channel``...) that
callers use, each forwarded to its part by :class:`forward`: typed (the part protocol's
signature, checked by mypy), written here once for every backend, and overridable in a
subclass like any method.

Why flat names and not ``store.channels.see_channel``: the seams are split by consumer
(:mod:`core.store.seams`), and a consumer declares the protocols it takes, which any object
with those methods satisfies (the store, a part, a fake); keeping the names flat left the
~500 call sites (about 430 of them conversations') and their fakes as they were, and costs
nothing on the hot path (one attribute lookup more: ``bench/load.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from core.store.channels import ChannelStore
from core.store.memories import MemoryRules
from core.store.seams import (
    ClaimStore,
    FeedbackStore,
    ModeStore,
    PlanStore,
    QueuedReflections,
    RecallReads,
    TurnStore,
    UsageStore,
    VectorStore,
)
from core.store.statements import Statement

P = ParamSpec("P")
R = TypeVar("R")


class Connection(Protocol):
    """What a part needs of its backend's connection besides its own dialect's helpers."""

    async def _run_statements(
        self, statements: Sequence[Statement], *, retry: bool = False
    ) -> list[int]: ...


DB = TypeVar("DB", bound=Connection)


class Part(Generic[DB]):
    """One part of a backend: an object over the backend's connection ``db``. It reaches
    the connection's statement hook (:class:`core.store.statements.StatementHook`) through
    ``db``, so the shared statement rules a part derives from run on the backend's own
    transaction."""

    def __init__(self, db: DB) -> None:
        self.db = db

    async def _run_statements(
        self, statements: Sequence[Statement], *, retry: bool = False
    ) -> list[int]:
        return await self.db._run_statements(statements, retry=retry)


class ConversationPart(
    TurnStore,
    QueuedReflections,
    ClaimStore,
    ModeStore,
    UsageStore,
    FeedbackStore,
    PlanStore,
    Protocol,
):
    """What a backend's conversations part implements: the conversation seams whole but
    ``finish_reflection`` (the memory rules') and ``sweep_interval_s`` (the connection's)."""


class forward(Generic[P, R]):
    """A flat method of the store that is ``method`` of the part in attribute ``part``:
    ``add_turn = forward("conversations", ConversationPart.add_turn)``. Read on a store, it
    is the part's bound method, typed as the part protocol declares it; a subclass may
    override the name with a method of its own (and call ``super()``)."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.name = method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(f"{owner.__name__}.{name} forwards to {self.part}.{self.name}")

    @overload
    def __get__(self, store: None, owner: type) -> forward[P, R]: ...

    @overload
    def __get__(self, store: object, owner: type) -> Callable[P, R]: ...

    def __get__(self, store: object | None, owner: type) -> Any:
        if store is None:
            return self
        return getattr(getattr(store, self.part), self.name)


@dataclass(frozen=True, slots=True)
class Parts:
    """A backend's four part classes, each made with the backend's connection (the store)."""

    conversations: Callable[[Any], ConversationPart]
    channels: Callable[[Any], ChannelStore]
    vectors: Callable[[Any], VectorStore]
    recall_log: Callable[[Any], RecallReads]


_C, _CH, _V, _R = "conversations", "channels", "vectors", "recall_log"


class ComposedStore(MemoryRules):
    """The store class of every backend: the memory rules, its parts and the flat names of
    :class:`core.store.seams.Store` forwarded to them (module docstring). A backend's store
    derives from this and from its connection, names its part classes in :attr:`parts`,
    implements ``_transact`` (and ``_after_erase`` where erasing needs a step after the
    commit) and the memory reads."""

    parts: ClassVar[Parts]
    """The backend's part classes; each is made with the store when the store is."""

    conversations: ConversationPart
    channels: ChannelStore
    vectors: VectorStore
    recall_log: RecallReads

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # the connection's
        self.conversations = self.parts.conversations(self)
        self.channels = self.parts.channels(self)
        self.vectors = self.parts.vectors(self)
        self.recall_log = self.parts.recall_log(self)

    # ---------------------------------------------------------------- conversations
    add_turn = forward(_C, ConversationPart.add_turn)
    receive_turn = forward(_C, ConversationPart.receive_turn)
    finish_turn = forward(_C, ConversationPart.finish_turn)
    set_reply_ref = forward(_C, ConversationPart.set_reply_ref)
    get_turn = forward(_C, ConversationPart.get_turn)
    find_turn = forward(_C, ConversationPart.find_turn)
    answer_to = forward(_C, ConversationPart.answer_to)
    recent_turns = forward(_C, ConversationPart.recent_turns)
    unanswered_turns = forward(_C, ConversationPart.unanswered_turns)
    prune_turns = forward(_C, ConversationPart.prune_turns)
    turns_to_reflect = forward(_C, ConversationPart.turns_to_reflect)
    set_reflection = forward(_C, ConversationPart.set_reflection)
    reflection_lock = forward(_C, ConversationPart.reflection_lock)
    claim_event = forward(_C, ConversationPart.claim_event)
    mark_once = forward(_C, ConversationPart.mark_once)
    claim_recovery = forward(_C, ConversationPart.claim_recovery)
    event_claimed_elsewhere = forward(_C, ConversationPart.event_claimed_elsewhere)
    get_mode = forward(_C, ConversationPart.get_mode)
    set_mode = forward(_C, ConversationPart.set_mode)
    record_usage = forward(_C, ConversationPart.record_usage)
    usage_report = forward(_C, ConversationPart.usage_report)
    chat_messages_since = forward(_C, ConversationPart.chat_messages_since)
    record_feedback = forward(_C, ConversationPart.record_feedback)
    feedback_report = forward(_C, ConversationPart.feedback_report)
    answered_message = forward(_C, ConversationPart.answered_message)
    put_pending = forward(_C, ConversationPart.put_pending)
    take_pending = forward(_C, ConversationPart.take_pending)
    pending_owner = forward(_C, ConversationPart.pending_owner)
    drop_pending = forward(_C, ConversationPart.drop_pending)

    # ---------------------------------------------------------------- channels
    see_channel = forward(_CH, ChannelStore.see_channel)
    channel = forward(_CH, ChannelStore.channel)
    set_channel_memory = forward(_CH, ChannelStore.set_channel_memory)
    list_channels = forward(_CH, ChannelStore.list_channels)
    attribute = forward(_CH, ChannelStore.attribute)
    mark_changed = forward(_CH, ChannelStore.mark_changed)
    touch_channel = forward(_CH, ChannelStore.touch_channel)
    attributions = forward(_CH, ChannelStore.attributions)
    unattribute = forward(_CH, ChannelStore.unattribute)

    # ---------------------------------------------------------------- vectors
    put_embeddings = forward(_V, VectorStore.put_embeddings)
    active_embeddings = forward(_V, VectorStore.active_embeddings)
    memories_without_embedding = forward(_V, VectorStore.memories_without_embedding)
    memory_head = forward(_V, VectorStore.memory_head)
    embedding_version = forward(_V, VectorStore.embedding_version)

    # ---------------------------------------------------------------- recall log
    memory_uses = forward(_R, RecallReads.memory_uses)
    recall_log_started = forward(_R, RecallReads.recall_log_started)
