"""The memory rules, written once for every backend over a small transaction protocol.

What is decided here, and nowhere else:

- **add** (:meth:`MemoryRules.add`): supersede comes before dedupe. An active memory with the
  same normalised text (the twin; one per reach) usable where the new one was said makes it
  a duplicate; else the new one is compared
  (:func:`core.rules.reassert.decide` over :meth:`core.rules.dedupe.Deduper.decide`) with its
  ``DEDUPE_CANDIDATES`` best BM25 neighbours about the same person
  (:func:`core.rules.about.same_person`), leaving out those it names in ``supersedes``; it is
  stored, its ``added`` event appended, and it supersedes the neighbours it narrows, then the
  memories it names. A duplicate said again where its stored twin is not usable may widen
  the twin's place to there (:mod:`core.rules.reassert`). A duplicate still supersedes the
  named ones (by the memory it duplicates). A memory dedupe answered with an older one
  confirms it (:func:`core.store.writes.confirmed`, :class:`core.store.seams.RecallLog`);
- **add many**: each memory deduped against all before it, or, without a deduper (trusted
  bulk loads), only exact duplicates skipped, in one set-based insert;
- **a reflection's end** (:meth:`MemoryRules.finish_reflection`): the guard (the user turn
  still waits for its reflection, :func:`core.store.writes.still_reflecting`), then the
  user's memories, the channel's entries and who said them, the turn ``done`` and the usage,
  all in one transaction; only the usage (and the attempt) when the guard fails;
- **forget** one memory (with its copies: the same sentence learned in other places),
  **forget all** of a user (their turns first, so a reflection that
  commits after finds its turn gone and writes nothing; then the memories, actives first;
  then the turns again, for an answer stored meanwhile), and the **purge** of memories past
  the cleanup undo window: each erasure appends a ``forgotten`` event and unhooks the events
  pointing at it (:meth:`MemoryTx.erase`);
- **cleanup changes** (:mod:`core.store.cleanup` holds their rules) run inside the same
  transactions, on the user's row.

A backend supplies its SQL as a :class:`MemoryTx` (one open write transaction: SQLite
:class:`core.store.sqlite.tx.SQLiteTx`, PostgreSQL :class:`core.store.postgres.tx.PostgresTx`)
and the way to run one (:meth:`MemoryRules._transact`); its store class derives from
:class:`MemoryRules` through :class:`core.store.composed.ComposedStore`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, Literal, Protocol, TypeVar

from core.errors import StoreError
from core.rules.about import same_person
from core.rules.cleanup_ops import AppliedChange, ChangeOp
from core.rules.dedupe import Deduper
from core.rules.places import reach_of, stored_place, usable
from core.rules.reassert import decide
from core.rules.text import index_terms, normalize
from core.store.cleanup import ChangeTx, apply_ops, check_disjoint, no_such_user, undo
from core.store.writes import bulk_results, confirmed, still_reflecting
from core.types import (
    AddResult,
    Attribution,
    MemoryWrite,
    NewMemory,
    Place,
    ReflectionState,
    TeamWrite,
    UsageRecord,
    utcnow,
)

logger = logging.getLogger(__name__)

DEDUPE_CANDIDATES = 50
"""How many BM25 neighbours of a new memory are compared by Jaccard in dedupe."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A stored active memory as dedupe sees it."""

    id: int
    text: str
    about: str | None = None
    place: Place | None = None


@dataclass(frozen=True, slots=True)
class Candidates:
    """What dedupe compares a new memory with: ``twins`` (the active memories with the same
    normalised text, at most one per reach, by id) and, when there is none, its ``near``
    BM25 neighbours."""

    twins: Sequence[Candidate] = ()
    near: Sequence[Candidate] = ()


@dataclass(frozen=True, slots=True)
class NewRow:
    """A memory as its owner's row stores it: ``memory``, its normalised text ``norm``,
    index terms ``terms`` (:func:`core.rules.text.index_terms`) and its ``place`` and
    ``reach`` columns (:func:`core.rules.places.stored_place`)."""

    memory: NewMemory
    norm: str
    terms: Sequence[str]
    place: str
    reach: str


def new_row(uid: int, user_key: str, memory: NewMemory) -> NewRow:
    """``memory`` as the row of user ``uid`` (``user_key``) stores it."""
    return NewRow(
        memory,
        normalize(memory.text),
        index_terms(uid, memory.text),
        *stored_place(memory.place, user_key=user_key),
    )


SUPERSEDE = (
    "UPDATE memories SET superseded_by = ?, superseded_at = ?"
    " WHERE id = ? AND uid = ? AND superseded_by IS NULL AND id <> ?"
    " AND EXISTS (SELECT 1 FROM memories n WHERE n.id = ? AND n.uid = ?)"
)
"""Both dialects' statement of :meth:`MemoryTx.set_superseded` (``?`` placeholders: new id,
at, old id, uid, new id, new id, uid; PostgreSQL numbers them)."""

EVENT = (
    "INSERT INTO memory_events(uid, memory_id, event, at, conversation_key, related_id)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
"""Both dialects' statement of :meth:`MemoryTx.event` (``?`` placeholders: uid, memory id,
event, at, conversation key, related id; PostgreSQL numbers them)."""


def supersede_params(uid: int, *, old_id: int, new_id: int, at: object) -> tuple[object, ...]:
    """:data:`SUPERSEDE`'s parameters in order (``at`` as the backend stores a time)."""
    return (new_id, at, old_id, uid, new_id, new_id, uid)


class MemoryTx(Protocol):
    """One open write transaction of a backend over users' memories: SQL only, no rule.

    ``uid`` is a user's numeric row id (:meth:`user`); every statement taking one is scoped
    by it, so another user's ids are never read, changed or erased. Times are aware UTC.
    Errors: the driver's, or ``StoreError``; the caller's transaction then rolls back.
    """

    async def user(self, user_key: str, *, create: bool = False, wait: bool = False) -> int | None:
        """The row id of ``user_key`` (None: no row; one is inserted when ``create``). Every
        write of a user's memories calls this first: PostgreSQL locks the row until the
        commit (one user's writes are serialised across replicas). ``wait``: when no row is
        committed, wait for a transaction inserting it now and return its id (a user's first
        reflection in flight), leaving no row behind otherwise."""
        ...

    async def dedupe_candidates(
        self, uid: int, *, norm: str | None, text: str, limit: int
    ) -> Candidates:
        """The active twins of normalised text ``norm`` (None: none looked up) or, when there
        is none, at most ``limit`` best BM25 neighbours of ``text`` among the user's active
        memories."""
        ...

    async def widen(self, uid: int, memory_id: int, *, place: str, reach: str) -> None:
        """Active memory ``memory_id`` of the user takes the ``place`` and ``reach`` columns
        (:func:`core.rules.places.stored_place`); its index follows the new reach. (Its
        ``restored`` event is the rules', :meth:`event`.)"""
        ...

    async def insert(self, uid: int, row: NewRow, *, at: datetime) -> int | None:
        """Store ``row`` (active; created ``at`` unless it says when) and return its id;
        None, with nothing stored and the transaction usable, when an active memory with its
        ``norm`` and ``reach`` was stored meanwhile by another transaction (the unique
        index). (Its ``added`` event is the rules', :meth:`event`.)"""
        ...

    async def insert_many(
        self, uid: int, rows: Sequence[NewRow]
    ) -> tuple[dict[tuple[str, str], int], set[int]]:
        """Store ``rows`` in order in set-based statements, skipping each whose ``norm`` is
        active already in its ``reach``, each new one with its ``added`` event. Returns the
        active id of each ``(norm, reach)`` after it, and the ids this call stored."""
        ...

    async def set_superseded(self, uid: int, *, old_id: int, new_id: int, at: datetime) -> bool:
        """Run :data:`SUPERSEDE`: the user's active memory ``old_id`` superseded at ``at`` by
        ``new_id``, when that is another memory of the user's; False when nothing changed."""
        ...

    async def event(
        self,
        uid: int,
        memory_id: int,
        event: str,
        *,
        at: datetime,
        conversation_key: str | None,
        related_id: int | None = None,
    ) -> None:
        """Run :data:`EVENT`: append ``event`` of the user's ``memory_id`` at ``at`` to the
        memory's history (``related_id``: the memory it points at)."""
        ...

    async def confirm(self, uid: int, memory_ids: Sequence[int]) -> None:
        """One more confirmation for each of ``memory_ids`` (repeats count; the user's)."""
        ...

    async def turn_state(
        self, *, turn_id: int, user_key: str
    ) -> tuple[bool, ReflectionState | None]:
        """Whether ``user_key`` has the turn ``turn_id``, and its reflection state; the turn's
        row stays locked until the commit (PostgreSQL: a mode change waits for it)."""
        ...

    async def end_reflection(
        self,
        *,
        turn_id: int,
        state: ReflectionState | None,
        attempts: int | None,
        usage: Sequence[UsageRecord],
    ) -> None:
        """Record ``usage`` and, unless ``state`` is None, the turn's reflection state and
        ``attempts`` (when given), only while the turn still waits for its reflection; with
        ``state`` None, ``attempts`` (when given) is only noted, never lowered."""
        ...

    async def attribute(self, *, channel_key: str, entries: Sequence[Attribution]) -> None:
        """As :meth:`core.store.channels.ChannelStore.attribute`, inside this transaction."""
        ...

    async def memory_ids(
        self, uid: int, *, active: bool, after: int, limit: int | None
    ) -> list[int]:
        """Ids above ``after`` of the user's active (or superseded and retired) memories, by
        id, at most ``limit`` (None: all)."""
        ...

    async def copies(self, uid: int, memory_id: int) -> list[int]:
        """Ids of the user's other active memories with the normalised text of the user's
        active memory ``memory_id`` (the same sentence learned in other places), by id; empty
        when ``memory_id`` is not an active memory of the user."""
        ...

    async def erase(self, uid: int, memory_ids: Sequence[int]) -> int:
        """Delete the user's memories ``memory_ids`` (others' ids are ignored) with their
        embeddings, uses and channel entries; each gets a ``forgotten`` event (actives first,
        then by id) and events of other memories pointing at them lose the pointer. Returns
        how many were deleted."""
        ...

    async def erased(self, uid: int) -> None:
        """After :meth:`erase`, in the same transaction: drop what else still holds the text
        (SQLite rewrites the user's FTS5 index; PostgreSQL has nothing to do)."""
        ...

    async def erase_conversations(self, user_key: str) -> None:
        """Delete the user's turns, the answers to them and the user's pending actions."""
        ...

    async def retired_before(self, older_than: datetime) -> list[tuple[str, int]]:
        """``(user key, memory id)`` of memories a cleanup change retired or superseded
        before ``older_than`` and still out of recall, by user then id (all users)."""
        ...

    def changes(self, uid: int) -> ChangeTx[Any]:
        """The cleanup changes' SQL for the user in this transaction."""
        ...


class MemoryRules(ABC):
    """The memory writes of :class:`core.store.seams.Store` (add, add many, a reflection's
    end, forget, forget all, cleanup changes and the purge) over a backend's :class:`MemoryTx`.
    A backend implements :meth:`_transact` (and :meth:`_after_erase` when erasing needs a step
    after the commit)."""

    forget_batch: int | None = None
    """Memories ``forget_all`` erases per transaction (None: the whole user in one)."""

    @abstractmethod
    async def _transact(
        self, work: Callable[[MemoryTx], Awaitable[T]], *, retry: bool = False
    ) -> T:
        """``work`` in one write transaction; its value after the commit. An exception rolls
        it back and is raised. ``retry``: run it again when the database aborted it to break
        a deadlock (the user's commands whose locks cross the turn loop's)."""

    async def _after_erase(self) -> None:  # noqa: B027 (nothing by default, on purpose)
        """After the commit of an erasure (SQLite truncates its WAL); nothing by default."""

    # ---------------------------------------------------------------- writes
    async def add(
        self, *, user_key: str, memory: NewMemory, dedupe: Deduper, supersedes: Sequence[int] = ()
    ) -> AddResult:
        async def work(tx: MemoryTx) -> AddResult:
            uid = await _created(tx, user_key)
            result = await self._add_one(tx, uid, user_key, memory, dedupe, supersedes)
            await _confirm(tx, uid, [memory], [result])
            return result

        return await self._transact(work)

    async def add_many(
        self, *, user_key: str, memories: Sequence[NewMemory], dedupe: Deduper | None
    ) -> list[AddResult]:
        """Write several memories in one transaction: with a ``dedupe`` each is checked
        against all before it; with None (bulk loads of trusted data) only exact duplicates
        are skipped, the rows going in by set-based statements."""

        async def work(tx: MemoryTx) -> list[AddResult]:
            uid = await _created(tx, user_key)
            if dedupe is None:
                results = await _bulk_add(tx, uid, user_key, memories)
            else:
                results = [await self._add_one(tx, uid, user_key, m, dedupe) for m in memories]
            await _confirm(tx, uid, memories, results)
            return results

        return await self._transact(work)

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
        async def work(tx: MemoryTx) -> list[AddResult]:
            # The user's row first, then the turn's, as forget_all takes them (no deadlock);
            # the turn's lock holds a mode change (which turns it off) until the commit.
            uid = await tx.user(user_key, create=bool(memories))
            found, state = await tx.turn_state(turn_id=turn_id, user_key=user_key)
            if not still_reflecting(state):
                raise _Dropped(found)  # rolls back a user row made for nothing
            results = []
            if memories:
                assert uid is not None
                for w in memories:
                    results.append(
                        await self._add_one(tx, uid, user_key, w.memory, dedupe, w.supersedes)
                    )
                await _confirm(tx, uid, [w.memory for w in memories], results)
            if team is not None and team.memories:
                results += await self._add_team(tx, team, dedupe)
            await tx.end_reflection(turn_id=turn_id, state="done", attempts=attempts, usage=usage)
            return results

        try:
            return await self._transact(work)
        except _Dropped as dropped:
            # Only the usage, and the attempt on the user's turn (when there is one), so a
            # run again after this commit (its outcome lost) knows the usage is in.
            noted = attempts if dropped.found else None
            await self._transact(
                partial(_end_reflection, turn_id=turn_id, attempts=noted, usage=usage)
            )
            return None

    async def _add_team(self, tx: MemoryTx, team: TeamWrite, dedupe: Deduper) -> list[AddResult]:
        """Inside a reflection's write: the channel's entries and who said the new ones."""
        uid = await _created(tx, team.channel_key)
        results = [await self._add_one(tx, uid, team.channel_key, m, dedupe) for m in team.memories]
        await _confirm(tx, uid, team.memories, results)
        said = [replace(team.said, memory_id=r.id) for r in results if r.status == "added"]
        if said:
            await tx.attribute(channel_key=team.channel_key, entries=said)
        return results

    async def _add_one(
        self,
        tx: MemoryTx,
        uid: int,
        user_key: str,
        memory: NewMemory,
        dedupe: Deduper,
        supersedes: Sequence[int] = (),
    ) -> AddResult:
        """Inside a write holding the user's row: :meth:`add`'s rule for one memory."""
        norm = normalize(memory.text)
        known = await tx.dedupe_candidates(
            uid, norm=norm, text=memory.text, limit=DEDUPE_CANDIDATES
        )
        replacing = frozenset(supersedes)
        # Only memories about the same person (core.rules.about.same_person).
        candidates = [c for c in known.near if same_person(c.about, memory.about)]
        if known.twins:
            # A copy usable where this was said (the common case) needs no rule at all;
            # said word for word where none is, it may take the place, or be stored for
            # it beside them (core.rules.reassert), its neighbours judged as well.
            here = next((t for t in known.twins if _usable(t, memory, user_key)), None)
            if here is not None:
                return await _superseding(tx, uid, here.id, memory, supersedes)
            twin_ids = {t.id for t in known.twins}
            near = await tx.dedupe_candidates(
                uid, norm=None, text=memory.text, limit=DEDUPE_CANDIDATES
            )
            candidates = [*known.twins] + [
                c for c in near.near if c.id not in twin_ids and same_person(c.about, memory.about)
            ]
        decision = decide(
            dedupe,
            text=memory.text,
            about=memory.about,
            place=memory.place,
            known=candidates,
            replacing=replacing,
        )
        if decision.duplicate_of is not None:
            if decision.widen is not None:
                await _widen(tx, uid, user_key, decision.duplicate_of.id, decision.widen, memory)
            return await _superseding(tx, uid, decision.duplicate_of.id, memory, supersedes)
        at = utcnow()
        row = new_row(uid, user_key, memory)
        memory_id = await tx.insert(uid, row, at=at)
        if memory_id is not None:
            await tx.event(uid, memory_id, "added", at=at, conversation_key=memory.conversation_key)
        else:
            again = await tx.dedupe_candidates(uid, norm=norm, text=memory.text, limit=0)
            twin = next((t for t in again.twins if reach_of(t.place) == row.reach), None)
            if twin is None:
                raise StoreError("a memory was refused as a duplicate of none")
            logger.info("user=%s: identical memory stored concurrently as #%s", user_key, twin.id)
            return await _superseding(tx, uid, twin.id, memory, supersedes)
        # A more specific fact (or a new state) supersedes the general one it narrows, then
        # the new one supersedes those named (never compared: ``replacing``).
        narrowed = [old.id for old in decision.supersedes]
        return await _superseding(tx, uid, memory_id, memory, [*narrowed, *supersedes], "added")

    # ---------------------------------------------------------------- erasure
    async def forget(self, *, user_key: str, memory_id: int) -> bool:
        """Erase one memory (:meth:`MemoryTx.erase`, :meth:`MemoryTx.erased`) and, when it
        is active, its copies (:meth:`MemoryTx.copies`: the owner said the same sentence in
        other places; forgetting it is forgetting the fact, wherever it is asked)."""

        async def work(tx: MemoryTx) -> bool:
            uid = await tx.user(user_key)
            if uid is None:
                return False
            copies = await tx.copies(uid, memory_id)
            if await tx.erase(uid, [memory_id, *copies]) != 1 + len(copies):
                return False
            await tx.erased(uid)
            return True

        gone = await self._transact(work)
        if gone:
            await self._after_erase()
        return gone

    async def forget_all(self, *, user_key: str) -> int:
        """Erase all the user's memories (superseded ones too), turns and pending actions;
        returns how many active memories there were. With :attr:`forget_batch`, in batches
        of that many, each its own short transaction (other users' writes interleave)."""
        if self.forget_batch is None:

            async def everything(tx: MemoryTx) -> int:
                uid = await _forget_turns(tx, user_key=user_key)
                if uid is None:
                    return 0
                actives = await tx.memory_ids(uid, active=True, after=0, limit=None)
                count = await tx.erase(uid, actives)
                await tx.erase(uid, await tx.memory_ids(uid, active=False, after=0, limit=None))
                await tx.erased(uid)
                return count

            count = await self._transact(everything, retry=True)
            await self._after_erase()
            return count
        # The turns go first, and the uid is read in that same write: a reflection that
        # commits after it finds its turn gone and writes nothing, one that committed before
        # it left memories the batches below erase (``finish_reflection``).
        batch = self.forget_batch
        uid = await self._transact(partial(_forget_turns, user_key=user_key), retry=True)
        count = 0
        if uid is not None:
            for active in (True, False):
                last = 0
                while True:
                    ids, erased = await self._transact(
                        partial(_erase_batch, uid=uid, active=active, after=last, limit=batch)
                    )
                    if not ids:
                        break
                    last = ids[-1]
                    count += erased if active else 0

        async def end(tx: MemoryTx) -> None:
            await tx.erase_conversations(user_key)  # an answer stored meanwhile
            if uid is not None:
                await tx.erased(uid)

        await self._transact(end, retry=True)
        await self._after_erase()
        return count

    async def purge_retired(self, *, older_than: datetime) -> int:
        """Erase memories a cleanup change retired or superseded before ``older_than`` (and
        still out of recall), one user per transaction, as ``forget`` does."""
        rows = await self._transact(lambda tx: tx.retired_before(older_than))
        by_user: dict[str, list[int]] = {}
        for user_key, memory_id in rows:
            by_user.setdefault(user_key, []).append(memory_id)
        erased = 0
        for user_key, ids in by_user.items():
            erased += await self._transact(partial(_erase_ids, user_key=user_key, ids=ids))
        if erased:
            await self._after_erase()
        return erased

    # ---------------------------------------------------------------- cleanup changes
    async def apply_change(
        self, *, user_key: str, change_id: str, ops: Sequence[ChangeOp]
    ) -> AppliedChange:
        """Apply ``ops`` as one change (:func:`core.store.cleanup.apply_ops`). Every id must be
        an active memory of the user, and no memory may appear in two operations; else
        ``MemoryNotFound`` / ``StoreError`` and nothing changes."""
        seen = check_disjoint(ops)

        async def work(tx: MemoryTx) -> AppliedChange:
            uid = await tx.user(user_key)
            if uid is None:
                raise no_such_user(seen)
            return await apply_ops(tx.changes(uid), change_id=change_id, ops=ops, seen=seen)

        return await self._transact(work)

    async def undo_change(self, *, user_key: str, change_id: str) -> int:
        """Restore the exact state before ``change_id`` (:func:`core.store.cleanup.undo`);
        returns the memories restored. ``StoreError`` when it cannot be undone."""

        async def work(tx: MemoryTx) -> int:
            uid = await tx.user(user_key)
            return await undo(tx.changes(uid) if uid is not None else None, change_id=change_id)

        return await self._transact(work)


class _Dropped(Exception):
    """A reflection's write found its turn no longer waiting (``found``: the turn is there)."""

    def __init__(self, found: bool) -> None:
        super().__init__("the turn no longer waits for its reflection")
        self.found = found


async def _end_reflection(
    tx: MemoryTx, *, turn_id: int, attempts: int | None, usage: Sequence[UsageRecord]
) -> None:
    await tx.end_reflection(turn_id=turn_id, state=None, attempts=attempts, usage=usage)


def _usable(twin: Candidate, memory: NewMemory, owner: str) -> bool:
    """Whether stored ``twin`` is usable where ``memory`` of ``owner`` was said: the place
    rule, except for a channel's own entries (``owner`` is the channel's key), which are
    read by that key alone whatever place they record (a channel that turned private
    records its new entries under the narrower kind): one copy of a sentence a channel."""
    if memory.place is not None and memory.place.channel_key == owner:
        return True
    return usable(twin.place, memory.place)


async def _widen(
    tx: MemoryTx, uid: int, user_key: str, memory_id: int, place: Place, memory: NewMemory
) -> None:
    """Memory ``memory_id`` takes ``place``, where its owner said ``memory`` again."""
    place_key, reach = stored_place(place, user_key=user_key)
    at = utcnow()
    await tx.widen(uid, memory_id, place=place_key, reach=reach)
    # The event moves the user's memory head, which hybrid recall's cache of reaches follows.
    await tx.event(uid, memory_id, "restored", at=at, conversation_key=memory.conversation_key)


async def _created(tx: MemoryTx, user_key: str) -> int:
    uid = await tx.user(user_key, create=True)
    assert uid is not None
    return uid


async def _superseding(
    tx: MemoryTx,
    uid: int,
    memory_id: int,
    memory: NewMemory,
    supersedes: Sequence[int],
    status: Literal["added", "duplicate"] = "duplicate",
) -> AddResult:
    """The result of writing ``memory`` as ``memory_id``, which supersedes each of
    ``supersedes`` that is an active memory of the user (in order, once each)."""
    now = utcnow()
    done = [
        old_id
        for old_id in dict.fromkeys(supersedes)
        if await supersede(
            tx,
            uid,
            old_id=old_id,
            new_id=memory_id,
            at=now,
            conversation_key=memory.conversation_key,
        )
    ]
    return AddResult(id=memory_id, status=status, superseded=tuple(done))


async def supersede(
    tx: MemoryTx,
    uid: int,
    *,
    old_id: int,
    new_id: int,
    at: datetime,
    conversation_key: str | None,
) -> bool:
    """Mark the user's active memory ``old_id`` superseded by the user's ``new_id`` at ``at``,
    with its ``superseded`` event (related to ``new_id``); False (nothing changed) when either
    is not the user's, ``old_id`` is not active, or they are the same."""
    if old_id == new_id or not await tx.set_superseded(uid, old_id=old_id, new_id=new_id, at=at):
        return False
    await tx.event(
        uid, old_id, "superseded", at=at, conversation_key=conversation_key, related_id=new_id
    )
    return True


async def _confirm(
    tx: MemoryTx, uid: int, memories: Sequence[NewMemory], results: Sequence[AddResult]
) -> None:
    ids = confirmed(memories, results)
    if ids:
        await tx.confirm(uid, ids)


async def _bulk_add(
    tx: MemoryTx, uid: int, user_key: str, memories: Sequence[NewMemory]
) -> list[AddResult]:
    if not memories:
        return []
    rows = [new_row(uid, user_key, m) for m in memories]
    ids, fresh = await tx.insert_many(uid, rows)
    return bulk_results([(r.norm, r.reach) for r in rows], ids, fresh)


async def _forget_turns(tx: MemoryTx, *, user_key: str) -> int | None:
    """The first step of a forget of everything: the user's row (locked; one being made by a
    first reflection in flight is waited for), then the turns, in that order as
    ``finish_reflection`` takes them."""
    uid = await tx.user(user_key, wait=True)
    await tx.erase_conversations(user_key)
    return uid


async def _erase_batch(
    tx: MemoryTx, *, uid: int, active: bool, after: int, limit: int
) -> tuple[list[int], int]:
    ids = await tx.memory_ids(uid, active=active, after=after, limit=limit)
    return ids, await tx.erase(uid, ids) if ids else 0


async def _erase_ids(tx: MemoryTx, *, user_key: str, ids: Sequence[int]) -> int:
    uid = await tx.user(user_key)
    if uid is None:
        return 0
    erased = await tx.erase(uid, ids)
    await tx.erased(uid)
    return erased
