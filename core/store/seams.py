"""The store seams, split by consumer.

Each is a small ``typing.Protocol`` with keyword-only arguments, taken only by the code that
needs it (a consumer needing several declares their union where it lives, e.g.
:class:`core.memory.reflection.ReflectionStore`):

- :class:`MemoryStore`: the user's memories (write, read, BM25 search, forget, export);
- :class:`CleanupStore`: cleanup changes (apply, undo, purge after the undo window);
- :class:`TurnStore`: conversation turns (history, answers, crash recovery, pruning);
- :class:`ReflectionQueue`: the durable queue of reflections and its per-user lock;
- :class:`ClaimStore`: claimed platform events and one-time marks;
- :class:`ModeStore`: per-user memory modes;
- :class:`UsageStore`: what every Claude call cost;
- :class:`RecallLog`: how each memory was used (recalled into answers, confirmed by writes);
- :class:`VectorStore`: embeddings for optional hybrid recall;
- :class:`Store`: all of them and ``close`` (what a backend implements, what composition opens;
  a backend is its connection and four parts, :mod:`core.store.composed`).

Every method is scoped to one ``user_key`` (``slack:T1:U1``, ``discord:42``, ``cli:alice``):
no method reads, ranks or deletes another user's rows. Backends: SQLite
(:mod:`core.store.sqlite.store`, the embedded default) and PostgreSQL
(:mod:`core.store.postgres.store`, for several bot processes sharing one database).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from core.rules.cleanup_ops import AppliedChange, ChangeOp
from core.rules.dedupe import Deduper
from core.store.channels import ChannelStore
from core.types import (
    AddResult,
    Memory,
    MemoryEvent,
    MemoryMode,
    MemoryStats,
    MemoryUse,
    MemoryWrite,
    NewMemory,
    NewTurn,
    ReflectionState,
    ScoredMemory,
    TeamWrite,
    Turn,
    UsageRecord,
    UsageRow,
    UserSummary,
)


class MemoryStore(Protocol):
    """Persistent per-user memories, their history, and BM25 search."""

    async def add(
        self, *, user_key: str, memory: NewMemory, dedupe: Deduper, supersedes: Sequence[int] = ()
    ) -> AddResult:
        """Write ``memory`` unless ``dedupe`` finds it among the user's active memories.

        ``supersedes`` names the user's memories the new one replaces (ids of other users
        are ignored). Supersede comes before dedupe: those memories are not compared with
        the new one (:meth:`core.rules.dedupe.Deduper.decide`), and when the new one duplicates
        another active memory, that one replaces them. A new memory also supersedes the
        active ones the rule finds it a more specific fact (or a new state) of.
        ``AddResult.superseded`` lists the ids actually superseded. Atomic.
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
        self,
        *,
        user_key: str,
        limit: int = 20,
        offset: int = 0,
        include_superseded: bool = False,
        reach: Sequence[str] | None = None,
        standing: bool = False,
        one_copy: bool = False,
    ) -> list[Memory]:
        """The user's memories, newest first, at most ``limit`` after ``offset``.

        ``reach`` keeps those whose reach token is one of these (the place rule,
        :func:`core.rules.places.usable_reaches`; None: all, an empty sequence: none);
        ``standing`` keeps only those that may enter the standing profile (every kind but a
        plain ``fact`` of category ``general``: :data:`core.store.rows.STANDING`), read from
        a partial index so a user with 10,000 memories costs no scan; ``one_copy``: a
        sentence the user said in several places (an active copy per reach) once, as its
        newest copy (what a listing shows; :data:`core.store.rows.ONE_COPY`).
        """
        ...

    async def count(self, *, user_key: str, one_copy: bool = False) -> int:
        """Number of the user's active memories (``one_copy``: of their active sentences,
        each counted once however many places it was learned in, as ``list_memories``
        lists them: :data:`core.store.rows.ONE_COPY_COUNT`, which reads only the memories
        learned outside the owner's DM)."""
        ...

    async def search(
        self,
        *,
        user_key: str,
        query: str,
        k: int,
        reach: Sequence[str] | None = None,
        pool: int | None = None,
    ) -> list[ScoredMemory]:
        """BM25 recall over the user's active memories, best first, at most ``k``.

        Any text is a valid query; ``reach`` as for :meth:`list_memories` (pushed into
        the index query: SQLite's FTS5 marker term, PostgreSQL's ranking filter).
        ``pool``: how many index candidates are re-scored (default
        :func:`core.rules.bm25.candidate_pool` of ``k``); a caller that reads a list deeper
        than the top it needs (score fusion) passes the pool of the top it needs.
        """
        ...

    async def forget(self, *, user_key: str, memory_id: int) -> bool:
        """Erase one memory's text; only its id and a ``forgotten`` event remain."""
        ...

    async def forget_all(self, *, user_key: str) -> int:
        """Erase all of the user's memories and conversation history; returns memories erased."""
        ...

    async def history(
        self, *, user_key: str, limit: int = 1000, newest_first: bool = False
    ) -> list[MemoryEvent]:
        """The user's memory events, oldest first (the first ``limit``); ``newest_first``:
        the newest ``limit``, newest first."""
        ...

    async def stats(self, *, user_key: str | None = None) -> MemoryStats:
        """Counts of active memories, for one user or for the whole store; a sentence its
        owner said in several places (a copy per place, :mod:`core.rules.reassert`) counted
        once, by its newest copy's kind and category, as listings show it."""
        ...

    async def export(self, *, user_key: str) -> list[Memory]:
        """All of the user's active memories, oldest first."""
        ...

    async def users(self, *, user_key: str | None = None) -> list[UserSummary]:
        """Every user key with memories, memory events or stored messages, sorted by key
        (byte order); with ``user_key``, just that one (an empty list: no such user)."""
        ...


class CleanupStore(Protocol):
    """Cleanup changes over a user's memories (:mod:`core.store.cleanup` holds their rules)."""

    async def apply_change(
        self, *, user_key: str, change_id: str, ops: Sequence[ChangeOp]
    ) -> AppliedChange:
        """Apply cleanup operations (merge, supersede, retire) as one undoable change."""
        ...

    async def undo_change(self, *, user_key: str, change_id: str) -> int:
        """Restore the exact state before a change; returns the memories restored."""
        ...

    async def purge_retired(self, *, older_than: datetime) -> int:
        """Erase, as ``forget`` does, memories a cleanup change retired or superseded before
        ``older_than`` (``utcnow() - UNDO_WINDOW``) and that are still out of recall;
        returns how many."""
        ...

    async def users_with_memories(self, *, at_least: int) -> list[str]:
        """User keys holding at least ``at_least`` active memories."""
        ...


class TurnStore(Protocol):
    """Conversation turns: history, answers, interrupted answers, pruning."""

    async def add_turn(self, *, turn: NewTurn) -> int:
        """Store one message; returns its turn id. A user message that will be answered is
        stored with ``reflection="answering"`` before the answer starts."""
        ...

    async def receive_turn(self, *, claim_keys: Sequence[str], turn: NewTurn) -> int | None:
        """The intake's one transaction before a platform acknowledgement: claim the event by
        all of ``claim_keys`` (as :meth:`ClaimStore.claim_event`) and store ``turn`` (as
        :meth:`add_turn`). Returns the turn id, or None when any key was claimed before
        (then nothing is written). Goes ahead of other users' writes. Raises the driver's
        error or ``StoreError`` with nothing written."""
        ...

    async def finish_turn(
        self,
        *,
        turn_id: int,
        answer: str,
        answer_ref: str | None = None,
        reflect: bool = True,
        usage: Sequence[UsageRecord] = (),
        recalled: Sequence[int] = (),
    ) -> int | None:
        """The end of a turn in one transaction: record ``usage`` (the calls the turn made),
        store the answer to ``turn_id``, redact the secrets of both (the user turn's text is
        rewritten, :func:`core.store.writes.redacted`) and queue its reflection
        (``pending``, or ``off`` when ``reflect`` is False; a turn already ``off``, its user's
        mode changed meanwhile, stays so). Returns the answer's turn id (None for an empty
        answer or a turn that was forgotten meanwhile; the usage is recorded all the same).

        ``recalled``: the ids of the memories the delivered answer's prompt carried; each of
        the turn's user's memories among them gets one more recall, now, in the
        :class:`RecallLog` (one upsert in the same transaction; others' ids are ignored). A
        failure of that upsert alone leaves the rest of the step done and counts one in
        ``RecallLog.recall_records_dropped``."""
        ...

    async def set_reply_ref(self, *, turn_id: int, reply_ref: str) -> None:
        """Record on the user turn ``turn_id`` the platform messages its answer in progress
        shows (``Turn.reply_ref``; replaces an earlier record), so that a crash before the
        answer is stored leaves them findable. Nothing when the turn is gone."""
        ...

    async def get_turn(self, *, turn_id: int) -> Turn | None:
        """One turn, or None."""
        ...

    async def find_turn(self, *, conversation_key: str, platform_ref: str) -> Turn | None:
        """The user turn stored for a platform message id in a conversation, or None."""
        ...

    async def answer_to(self, *, turn_id: int) -> Turn | None:
        """The assistant's answer to a user turn, or None."""
        ...

    async def recent_turns(
        self, *, conversation_key: str, limit: int, before_id: int | None = None
    ) -> list[Turn]:
        """The last ``limit`` turns of a conversation (before ``before_id``), oldest first."""
        ...

    async def unanswered_turns(self, *, since: datetime, conversation_prefix: str) -> list[Turn]:
        """User messages stored since ``since`` (conversation keys starting with the prefix)
        that have no answer: the process answering them died. Oldest first."""
        ...

    async def prune_turns(self, *, older_than: datetime) -> int:
        """Delete turns (and event claims) older than ``older_than`` that wait for nothing."""
        ...


class QueuedReflections(Protocol):
    """The durable queue of reflections (a state on each user turn) and its per-user lock:
    what a backend's conversations part holds (:mod:`core.store.composed`)."""

    async def turns_to_reflect(self) -> list[Turn]:
        """User turns whose reflection is queued (``pending``: the answer was delivered),
        oldest first. A turn still ``answering`` is not: it is reflected only once its
        answer is delivered (``finish_turn`` with ``reflect``), never when it failed."""
        ...

    async def set_reflection(
        self,
        *,
        turn_id: int,
        state: ReflectionState,
        attempts: int | None = None,
        usage: Sequence[UsageRecord] = (),
    ) -> None:
        """Record a reflection's state (and attempts so far), and the ``usage`` of the
        reflection's calls, in one transaction."""
        ...

    def reflection_lock(self, *, user_key: str) -> AbstractAsyncContextManager[None]:
        """Held around each reflection of ``user_key``: excludes other reflections of the
        user, also in other processes sharing the store."""
        ...


class ReflectionQueue(QueuedReflections, Protocol):
    """The queue and a reflection's end (the memory rules', :mod:`core.store.memories`)."""

    async def finish_reflection(
        self,
        *,
        turn_id: int,
        user_key: str,
        memories: Sequence[MemoryWrite],
        dedupe: Deduper,
        attempts: int,
        usage: Sequence[UsageRecord] = (),
        team: TeamWrite | None = None,
    ) -> list[AddResult] | None:
        """A reflection's end in ONE transaction: record ``usage`` (the reflection's calls);
        re-read the user turn ``turn_id`` of ``user_key`` and, while it still waits for its
        reflection (:func:`core.store.writes.still_reflecting`), write each of ``memories``
        as :meth:`MemoryStore.add` does (the same rule: supersede before dedupe, each one
        deduped against the stored memories and those before it; ``MemoryWrite.supersedes``
        as given, the caller keeps them to the ids it may name), then ``team``'s entries as
        :meth:`MemoryStore.add_many` does for its channel key, each new one attributed
        (:meth:`core.store.channels.ChannelStore.attribute`), and mark the turn ``done`` with
        ``attempts``. Returns one ``AddResult`` per memory, in order, those of ``team``
        after those of ``memories``; None when the turn no longer waits (memory paused or off,
        forgotten, already finished): then only the usage is written and the turn is left as
        it is (nothing of ``team`` either).

        A failure anywhere inside writes nothing (no memory, no mark, no usage): the turn
        stays pending, and running the reflection again is safe. Raises the driver's error
        or ``StoreError``."""
        ...

    sweep_interval_s: float | None
    """Seconds between looks for reflections other processes left behind (``turns_to_reflect``
    then returns only those); None when one process owns the store (start-up only)."""


class ClaimStore(Protocol):
    """Claimed platform events (each answered once, across restarts) and one-time marks."""

    async def claim_event(self, *, keys: Sequence[str]) -> bool:
        """Claim a platform event by all its keys (event id, channel+ts). True for the first
        claim of any of them, False if any was claimed before (also across restarts)."""
        ...

    async def mark_once(self, *, mark: str) -> bool:
        """True the first time ``mark`` is set (e.g. first-DM notice), False after that."""
        ...

    async def claim_recovery(self, *, turn_id: int) -> bool:
        """Claim for this process the start-up recovery of the stored user turn ``turn_id``
        (answering it after a crash left it unanswered): True when no live process holds
        it, i.e. never claimed, or claimed by a process that has died since, whose claim
        passes to this one (a recovery that died is recovered again at the next start);
        False while this process or another live one holds it. A claim outlives no process
        that held it: SQLite ties it to the process (one process owns the file), PostgreSQL
        to the holder's liveness lock (:mod:`core.store.postgres.base`)."""
        ...

    async def event_claimed_elsewhere(self, *, keys: Sequence[str]) -> bool:
        """True when another live process sharing the store claimed the event by any of its
        keys (it is answering it, or has): skip it. False when the claim is this process's or
        a dead one's (then an unanswered event is an interrupted one)."""
        ...


class ModeStore(Protocol):
    """Per-user memory modes."""

    async def get_mode(self, *, user_key: str) -> MemoryMode:
        """``on`` (default), ``paused`` (recall only) or ``off`` (neither recall nor learn)."""
        ...

    async def set_mode(self, *, user_key: str, mode: MemoryMode) -> None:
        """Set the user's memory mode. Leaving ``on`` also stops, in the same transaction,
        the reflections of the user's turns not reflected on yet (they become ``off``): what
        the user said before pausing is not learned after it."""
        ...


class ConversationStore(TurnStore, ReflectionQueue, ClaimStore, ModeStore, Protocol):
    """Turns, the reflection queue, claims and modes together (what a platform adapter's
    event path uses)."""


class UsageStore(Protocol):
    """What every Claude call cost, as the API reported it."""

    async def record_usage(self, *, usage: UsageRecord) -> None:
        """Record one call's usage."""
        ...

    async def usage_report(
        self,
        *,
        since: datetime,
        by: str = "kind",
        user_key: str | None = None,
        workspace: str | None = None,
    ) -> list[UsageRow]:
        """Totals since ``since`` grouped ``by`` user, workspace or kind (sorted by key)."""
        ...

    async def chat_messages_since(
        self, *, since: datetime, user_key: str | None = None, workspace: str | None = None
    ) -> int:
        """How many chat calls were recorded since ``since`` (for daily message caps)."""
        ...


class RecallReads(Protocol):
    """The recall log's reads (what a backend's recall log part holds)."""

    async def memory_uses(
        self, *, user_key: str, memory_ids: Sequence[int] | None = None
    ) -> dict[int, MemoryUse]:
        """The uses of the user's memories (``memory_ids``, or all), by id; a memory never
        recalled nor confirmed is absent."""
        ...

    async def recall_log_started(self) -> datetime | None:
        """When this store began recording recalls (the migration that added the log, or
        the store's creation), aware UTC; None when unknown."""
        ...


class RecallLog(RecallReads, Protocol):
    """How each memory was used, kept in a table of its own keyed by memory id (a turn's
    record touches neither the memory's row nor its recall index) and erased with the memory.
    Written by :meth:`TurnStore.finish_turn` (``recalled``: recalls) and by every memory write
    that dedupe answers with an existing memory (a confirmation of it; imports do not
    confirm)."""

    recall_records_dropped: int
    """Recall records this process failed to write (the turns were stored all the same)."""


@dataclass(frozen=True, slots=True)
class FeedbackRow:
    """Ratings of answers on one UTC ``day`` (``YYYY-MM-DD``) in one ``workspace``."""

    day: str
    workspace: str | None
    positive: int
    negative: int


class FeedbackStore(Protocol):
    """Thumbs up / down on answers: one rating per user and answer (a new one replaces it)."""

    async def record_feedback(
        self,
        *,
        answer_ref: str,
        user_key: str,
        workspace: str | None,
        positive: bool,
        at: datetime | None = None,
    ) -> None:
        """Store ``user_key``'s rating of the answer ``answer_ref`` (e.g.
        ``slack:{team}:{channel}:{ts}``), replacing an earlier one. Raises ``StoreError``."""
        ...

    async def feedback_report(self, *, since: datetime) -> list[FeedbackRow]:
        """Counts of ratings given since ``since``, by UTC day and workspace, sorted by day,
        then workspace (bytewise, None first), the same on every backend."""
        ...

    async def answered_message(
        self, *, user_key: str, platform_ref: str, conversation_prefix: str
    ) -> bool:
        """Whether ``user_key`` wrote the message ``platform_ref`` (a stored user turn) in a
        conversation whose key is ``conversation_prefix`` or starts with it and ``:``, and it
        has an answer: what a rating may rate (a rater's own answered message)."""
        ...


class VectorStore(Protocol):
    """Embeddings of memories, for optional semantic recall (float32 bytes per memory)."""

    async def put_embeddings(
        self, *, user_key: str, model: str, items: Sequence[tuple[int, bytes]]
    ) -> int:
        """Store vectors for the user's memories; returns how many were stored."""
        ...

    async def active_embeddings(
        self, *, user_key: str, model: str
    ) -> list[tuple[int, str, bytes, str]]:
        """(memory id, reach token, vector, the UTC day it was stored as ``YYYY-MM-DD``) of the
        user's active memories embedded by ``model``, by id."""
        ...

    async def memories_without_embedding(
        self, *, model: str, user_key: str | None = None, limit: int = 256
    ) -> list[tuple[str, int, str]]:
        """(user key, memory id, text) of active memories lacking a ``model`` embedding."""
        ...

    async def memory_head(self, *, user_key: str) -> int:
        """The user's last memory event id (0: none, or an unknown user): one indexed read;
        it changes whenever the user's active memories do (see :meth:`embedding_version`)."""
        ...

    async def embedding_version(self, *, user_key: str, model: str) -> tuple[int, int, int]:
        """``(last memory event id, active memories, active ones embedded by model)`` of the
        user: one indexed read that changes whenever the user's active memories or their
        embeddings do (every add, supersede, retire, forget and restore appends an event),
        also when another process sharing the store made the change. ``(0, 0, 0)`` for an
        unknown user."""
        ...


class PlanStore(Protocol):
    """What a chat button refers to, kept where every replica sees it: pending cleanup plans
    and single-use confirmations (forget all, undo), each under a random ``token``, owned by
    one ``user_key``, of one ``kind``, with an ``expires_at`` (aware UTC). ``forget_all``
    erases a user's pending actions with their memories."""

    async def put_pending(
        self,
        *,
        token: str,
        user_key: str,
        kind: str,
        payload: str,
        expires_at: datetime,
        replace: bool = False,
    ) -> None:
        """Keep a pending action (``payload``: opaque text, e.g. JSON). With ``replace`` the
        user's other pending actions of this ``kind`` go, in the same transaction. Expired
        actions of everyone are purged."""
        ...

    async def take_pending(
        self, *, token: str, user_key: str, kind: str, now: datetime
    ) -> str | None:
        """Remove and return the payload of ``token`` if it is ``user_key``'s, of ``kind`` and
        unexpired at ``now``; else None and nothing is removed. Atomic: of two takes of one
        token (two replicas, a replayed click) at most one gets the payload."""
        ...

    async def pending_owner(self, *, token: str, kind: str, now: datetime) -> str | None:
        """The user key owning the unexpired pending action ``token`` of ``kind``, or None."""
        ...

    async def drop_pending(self, *, token: str) -> None:
        """Remove the pending action ``token``, whoever owns it (nothing when it is gone)."""
        ...


class Store(
    ChannelStore,
    MemoryStore,
    CleanupStore,
    ConversationStore,
    UsageStore,
    RecallLog,
    FeedbackStore,
    VectorStore,
    PlanStore,
    Protocol,
):
    """Everything the core keeps: what each backend implements and composition opens."""

    migrated: tuple[str, ...]
    """Names of the migrations the open applied, in order (:mod:`core.store.schema`)."""

    async def close(self) -> None:
        """Flush and close."""
        ...
