"""The contract of :class:`core.store.memories.MemoryTx`, on SQLite and PostgreSQL alike: the
SQL each backend supplies to the shared memory rules, called directly inside one of the
backend's own transactions (``_transact``). A new backend passes this file before the
rules' tests (test_store.py, test_reflection_step.py, ...) can pass on it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import date, timedelta
from typing import TypeVar, cast

import pytest

from core.rules.cleanup_ops import MergeOp, RetireOp
from core.rules.dedupe import Deduper
from core.store.cleanup import MERGED_INSERT, StatementChangeTx, merged_row
from core.store.memories import MemoryRules, MemoryTx, new_row
from core.store.seams import Store
from core.types import Attribution, NewMemory, Place, utcnow
from tests.store_helpers import pending_turn

ALICE, BOB = "slack:T1:UA", "slack:T1:UB"
CHANNEL = "slack:T1:C1"
T = TypeVar("T")


async def run(store: Store, work: Callable[[MemoryTx], Awaitable[T]]) -> T:
    """``work`` in one write transaction of the store's own backend."""
    return await cast(MemoryRules, store)._transact(work)


async def test_users_are_made_once_and_never_shared(store: Store) -> None:
    async def work(tx: MemoryTx) -> tuple[int | None, ...]:
        return (
            await tx.user(ALICE),
            await tx.user(ALICE, create=True),
            await tx.user(ALICE, create=True),
            await tx.user(BOB, create=True),
            await tx.user("slack:T1:UNEVER", wait=True),
        )

    missing, alice, again, bob, never = await run(store, work)
    assert missing is None and never is None
    assert alice is not None and alice == again and bob is not None and bob != alice
    # The row made is committed with the transaction; a wait for one never made leaves none.
    assert await run(store, lambda tx: tx.user(ALICE)) == alice
    assert "slack:T1:UNEVER" not in [u.user_key for u in await store.users()]


async def test_insert_twin_neighbours_and_supersede_stay_within_one_user(store: Store) -> None:
    cats = NewMemory(text="The user has two cats named Miso and Tofu.")

    async def work(tx: MemoryTx) -> tuple[int, int]:
        alice = await tx.user(ALICE, create=True)
        bob = await tx.user(BOB, create=True)
        assert alice is not None and bob is not None
        at = utcnow()
        first = await tx.insert(alice, new_row(alice, ALICE, cats), at=at)
        bobs = await tx.insert(bob, new_row(bob, BOB, cats), at=at)
        assert first is not None and bobs is not None and first != bobs
        row = new_row(alice, ALICE, NewMemory(text="The user has two cats, Miso and Tofu!"))
        twin = await tx.dedupe_candidates(alice, norm=row.norm, text="cats", limit=5)
        assert list(twin.twins) == []
        assert [c.id for c in twin.near] == [first]  # Bob's memory is not Alice's neighbour
        again = new_row(alice, ALICE, cats)
        found = await tx.dedupe_candidates(alice, norm=again.norm, text=cats.text, limit=5)
        assert [t.id for t in found.twins] == [first] and list(found.near) == []
        nothing = await tx.dedupe_candidates(alice, norm="no such text", text="", limit=5)
        assert list(nothing.twins) == [] and list(nothing.near) == []
        # No twin looked up: the neighbours alone, the twin among them.
        near = await tx.dedupe_candidates(alice, norm=None, text=cats.text, limit=5)
        assert list(near.twins) == [] and [c.id for c in near.near] == [first]
        second = await tx.insert(alice, row, at=at)
        assert second is not None
        # Another user's id (either side), the same id, a superseded one: nothing changes.
        assert not await tx.set_superseded(alice, old_id=bobs, new_id=second, at=at)
        assert not await tx.set_superseded(alice, old_id=first, new_id=bobs, at=at)
        assert not await tx.set_superseded(alice, old_id=second, new_id=second, at=at)
        assert await tx.set_superseded(alice, old_id=first, new_id=second, at=at)
        assert not await tx.set_superseded(alice, old_id=first, new_id=second, at=at)
        await tx.event(alice, first, "superseded", at=at, conversation_key="c", related_id=second)
        assert await tx.memory_ids(alice, active=True, after=0, limit=None) == [second]
        assert await tx.memory_ids(alice, active=False, after=0, limit=None) == [first]
        assert await tx.memory_ids(bob, active=True, after=0, limit=1) == [bobs]
        return first, second

    first, second = await run(store, work)
    events = [
        (e.memory_id, e.event, e.related_id, e.conversation_key)
        for e in await store.history(user_key=ALICE)
    ]
    # Only the event appended: an insert's is the rules' (memories.py), not the SQL's.
    assert events == [(first, "superseded", second, "c")]
    assert [m.text for m in await store.list_memories(user_key=BOB)] == [cats.text]


async def test_insert_many_skips_active_twins_and_says_which_are_new(store: Store) -> None:
    await store.add_many(
        user_key=ALICE, memories=[NewMemory(text="The user likes tea.")], dedupe=None
    )
    texts = ["The user likes tea.", "The user likes coffee.", "The user likes coffee."]

    public = Place("slack", "public_channel", "T1", "C1")

    async def work(tx: MemoryTx) -> tuple[dict[tuple[str, str], int], set[int]]:
        uid = await tx.user(ALICE, create=True)
        assert uid is not None
        rows = [new_row(uid, ALICE, NewMemory(text=t)) for t in texts]
        # The same sentence learned in another place is a copy of its own (one per reach).
        rows.append(new_row(uid, ALICE, NewMemory(text=texts[0], place=public)))
        return await tx.insert_many(uid, rows)

    ids, fresh = await run(store, work)
    assert len(fresh) == 2 and ids[("the user likes coffee", "dm")] in fresh
    assert ids[("the user likes tea", "dm")] not in fresh
    assert ids[("the user likes tea", "pub_slack_t1")] in fresh
    assert [e.event for e in await store.history(user_key=ALICE)] == ["added"] * 3


async def test_one_active_copy_per_reach_and_copies_are_the_users_own(store: Store) -> None:
    tea = "The user likes tea."
    group = Place("slack", "group_dm", "T1", "G1")
    public = Place("slack", "public_channel", "T1", "C1")

    async def work(tx: MemoryTx) -> None:
        alice = await tx.user(ALICE, create=True)
        bob = await tx.user(BOB, create=True)
        assert alice is not None and bob is not None
        at = utcnow()
        ingroup = await tx.insert(alice, new_row(alice, ALICE, NewMemory(tea, place=group)), at=at)
        inpublic = await tx.insert(
            alice, new_row(alice, ALICE, NewMemory(tea, place=public)), at=at
        )
        bobs = await tx.insert(bob, new_row(bob, BOB, NewMemory(tea, place=public)), at=at)
        assert None not in (ingroup, inpublic, bobs)
        again = new_row(alice, ALICE, NewMemory(tea, place=group))
        found = await tx.dedupe_candidates(alice, norm=again.norm, text=tea, limit=5)
        assert [(t.id, t.place) for t in found.twins] == [(ingroup, group), (inpublic, public)]
        assert await tx.copies(alice, ingroup) == [inpublic]  # not Bob's
        assert await tx.copies(alice, inpublic) == [ingroup]
        assert await tx.copies(bob, ingroup) == []  # another user's id: nothing
        assert await tx.copies(bob, bobs) == []
        assert inpublic is not None and ingroup is not None
        assert await tx.set_superseded(alice, old_id=inpublic, new_id=ingroup, at=at)
        assert await tx.copies(alice, inpublic) == []  # not active: none
        assert await tx.copies(alice, ingroup) == []

    await run(store, work)


async def test_erase_takes_only_the_users_ids_with_their_events_and_entries(
    store: Store,
) -> None:
    mine = await store.add_many(
        user_key=ALICE,
        memories=[NewMemory(text="The user owns a red bike."), NewMemory(text="The user sings.")],
        dedupe=None,
    )
    bobs = await store.add_many(
        user_key=BOB, memories=[NewMemory(text="The user owns a blue car.")], dedupe=None
    )
    place = Place(platform="slack", kind="public_channel", workspace="T1", channel="C1")
    await store.see_channel(place=place)
    entry = await store.add_many(
        user_key=CHANNEL, memories=[NewMemory(text="The team ships on Fridays.")], dedupe=None
    )

    async def work(tx: MemoryTx) -> tuple[int, int]:
        alice = await tx.user(ALICE)
        channel = await tx.user(CHANNEL)
        assert alice is not None and channel is not None
        await tx.attribute(
            channel_key=CHANNEL,
            entries=[Attribution(memory_id=entry[0].id, said_at=utcnow(), said_by=ALICE)],
        )
        erased = await tx.erase(alice, [mine[0].id, bobs[0].id])
        await tx.erased(alice)
        gone = await tx.erase(channel, [entry[0].id])
        return erased, gone

    assert await run(store, work) == (1, 1)
    assert [m.text for m in await store.list_memories(user_key=ALICE)] == ["The user sings."]
    assert [m.text for m in await store.list_memories(user_key=BOB)] == [
        "The user owns a blue car."
    ]
    assert await store.search(user_key=ALICE, query="red bike", k=5) == []
    assert [e.event for e in await store.history(user_key=ALICE)][-1] == "forgotten"
    assert await store.attributions(channel_key=CHANNEL, memory_ids=None) == {}


async def test_turn_state_and_end_reflection(store: Store) -> None:
    turn_id = await pending_turn(store, ALICE)

    async def look(tx: MemoryTx) -> list[tuple[bool, object]]:
        return [
            await tx.turn_state(turn_id=turn_id, user_key=ALICE),
            await tx.turn_state(turn_id=turn_id, user_key=BOB),  # another user's turn
            await tx.turn_state(turn_id=10**9, user_key=ALICE),
        ]

    assert await run(store, look) == [(True, "pending"), (False, None), (False, None)]

    async def note(tx: MemoryTx) -> None:
        await tx.end_reflection(turn_id=turn_id, state=None, attempts=2, usage=())
        await tx.end_reflection(turn_id=turn_id, state=None, attempts=1, usage=())  # never lower

    await run(store, note)
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and (turn.reflection, turn.attempts) == ("pending", 2)
    await run(
        store, lambda tx: tx.end_reflection(turn_id=turn_id, state="done", attempts=3, usage=())
    )
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and (turn.reflection, turn.attempts) == ("done", 3)


async def test_a_failing_transaction_leaves_nothing(store: Store) -> None:
    async def work(tx: MemoryTx) -> None:
        uid = await tx.user(ALICE, create=True)
        assert uid is not None
        await tx.insert(uid, new_row(uid, ALICE, NewMemory(text="The user is tall.")), at=utcnow())
        raise RuntimeError("fails inside")

    with pytest.raises(RuntimeError):
        await run(store, work)
    assert await store.list_memories(user_key=ALICE) == []
    assert await store.history(user_key=ALICE) == []


async def test_conversations_and_retired_memories_are_found_for_erasure(store: Store) -> None:
    turn_id = await pending_turn(store, ALICE)
    bobs_turn = await pending_turn(store, BOB)
    kept = await store.add(
        user_key=ALICE, memory=NewMemory(text="The user runs."), dedupe=Deduper()
    )
    await store.apply_change(user_key=ALICE, change_id="c1", ops=[RetireOp(memory_id=kept.id)])

    async def work(tx: MemoryTx) -> list[tuple[str, int]]:
        await tx.erase_conversations(ALICE)
        return await tx.retired_before(utcnow() + timedelta(seconds=1))

    assert await run(store, work) == [(ALICE, kept.id)]
    assert await run(store, lambda tx: tx.retired_before(utcnow() - timedelta(days=1))) == []
    assert await store.get_turn(turn_id=turn_id) is None
    assert await store.get_turn(turn_id=bobs_turn) is not None


async def test_the_change_sql_runs_statements_with_id_lists_times_and_days(store: Store) -> None:
    """The backend's :class:`core.store.cleanup.ChangeSql`, which cleanup changes' statements
    (written once: :class:`core.store.cleanup.StatementChangeTx`) run through: ``?``
    placeholders, an id list, times and days in Python's types, rows changed, a new id."""

    async def work(tx: MemoryTx) -> None:
        alice = await tx.user(ALICE, create=True)
        bob = await tx.user(BOB, create=True)
        assert alice is not None and bob is not None
        at = utcnow()
        first = await tx.insert(alice, new_row(alice, ALICE, NewMemory(text="A cat.")), at=at)
        second = await tx.insert(alice, new_row(alice, ALICE, NewMemory(text="A dog.")), at=at)
        bobs = await tx.insert(bob, new_row(bob, BOB, NewMemory(text="A cat.")), at=at)
        changes = tx.changes(alice)
        assert isinstance(changes, StatementChangeTx)
        sql = changes.sql
        ids = f"SELECT id FROM memories WHERE uid = ? AND id IN {sql.id_list} ORDER BY id"
        assert [r[0] for r in await sql.rows(ids, alice, [first, second, bobs])] == [first, second]
        assert await sql.rows(ids, alice, []) == []
        changed = await sql.run(
            f"UPDATE memories SET valid_from = ?, updated_at = ? WHERE uid = ? AND id IN"
            f" {sql.id_list}",
            date(2024, 1, 2),
            at + timedelta(days=1),
            alice,
            [second, bobs],
        )
        assert changed == 1
        assert await changes.whose([second]) == [(None, date(2024, 1, 2), None)]
        later = "SELECT id FROM memories WHERE uid = ? AND updated_at > ?"
        hour = at + timedelta(hours=1)
        assert [r[0] for r in await sql.rows(later, alice, hour)] == [second]  # times as times
        merged = MergeOp((first, second), "A cat and a dog.", "fact", "general")
        source, origin, created, place = (await changes.active([first]))[first]
        assert place is not None
        labels = (source, origin, created, place)
        row = merged_row(alice, merged, norm="a cat and a dog", terms=[], labels=labels, now=at)
        new_id = await sql.insert(MERGED_INSERT, *row)
        assert new_id not in (first, second, bobs)
        assert set(await changes.active([first, second, new_id])) == {first, second, new_id}

    await run(store, work)
