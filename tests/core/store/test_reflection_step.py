"""The store contract for a reflection's end (``finish_reflection``), on SQLite and PostgreSQL
alike: its memories (with ``add``'s dedupe and supersede rule), the turn's done mark and the
call's usage in ONE transaction; a turn whose memory was paused, turned off or forgotten
while the model ran gets only the usage. A failure inside writes nothing, so the reflection
can simply run again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from core.errors import StoreError, storage_failed
from core.rules.dedupe import Deduper
from core.store.seams import Store
from core.store.sqlite.store import SQLiteStore
from core.types import AddResult, MemoryWrite, NewMemory
from tests.core.store.test_turn_steps import tokens_today, usage
from tests.store_helpers import fill_disk, free_disk, pending_turn

ALICE, BOB = "slack:T1:U1", "slack:T1:U2"


def learned(text: str, *supersedes: int) -> MemoryWrite:
    return MemoryWrite(
        memory=NewMemory(text=text, kind="preference", source="reflection"),
        supersedes=supersedes,
    )


async def finish(
    store: Store,
    turn_id: int,
    memories: Sequence[MemoryWrite],
    *,
    user_key: str = ALICE,
    attempts: int = 1,
    kind: str = "reflection",
) -> list[AddResult] | None:
    """``finish_reflection`` of ``turn_id`` with one reflection call's usage (30 tokens)."""
    return await store.finish_reflection(
        turn_id=turn_id,
        user_key=user_key,
        memories=memories,
        dedupe=Deduper(),
        attempts=attempts,
        usage=[usage(kind, turn_id)],
    )


async def texts(store: Store, user_key: str = ALICE) -> list[str]:
    return sorted(m.text for m in await store.list_memories(user_key=user_key, limit=50))


async def test_finish_reflection_writes_its_memories_and_marks_the_turn_done(
    store: Store,
) -> None:
    paris = await store.add(
        user_key=ALICE, memory=NewMemory(text="The user lives in Paris."), dedupe=Deduper()
    )
    tabs = await store.add(
        user_key=ALICE, memory=NewMemory(text="The user prefers tabs."), dedupe=Deduper()
    )
    turn_id = await pending_turn(store)
    results = await finish(
        store,
        turn_id,
        [
            learned("The user lives in Berlin.", paris.id),  # a correction, not a twin
            learned("The user likes green tea."),
            learned("The user likes green tea."),  # said once: no confirmation
            learned("The user prefers tabs."),  # stored before: one confirmation
        ],
    )
    assert results is not None
    assert [r.status for r in results] == ["added", "added", "duplicate", "duplicate"]
    assert results[0].superseded == (paris.id,)
    assert results[2].id == results[1].id and results[3].id == tabs.id
    assert await texts(store) == [
        "The user likes green tea.",
        "The user lives in Berlin.",
        "The user prefers tabs.",
    ]
    uses = await store.memory_uses(user_key=ALICE)
    assert uses[tabs.id].confirmations == 1 and results[1].id not in uses
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and (turn.reflection, turn.attempts) == ("done", 1)
    assert await tokens_today(store) == 30
    # Nothing to learn: the turn is done all the same, with its usage.
    other = await pending_turn(store)
    assert await finish(store, other, [], attempts=2) == []
    turn = await store.get_turn(turn_id=other)
    assert turn is not None and (turn.reflection, turn.attempts) == ("done", 2)


async def test_a_failure_at_the_done_mark_writes_none_of_the_memories(store: Store) -> None:
    turn_id = await pending_turn(store)
    memories = [learned("The user lives in Berlin."), learned("The user likes green tea.")]
    with pytest.raises(StoreError, match=r"(?i)check constraint") as caught:
        # The usage is refused with the done mark, after the memories.
        await finish(store, turn_id, memories, kind="bogus")
    assert storage_failed(caught.value)
    assert await texts(store) == [] and await store.history(user_key=ALICE) == []
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and (turn.reflection, turn.attempts) == ("pending", 0)
    assert await tokens_today(store) == 0
    # Run again: each memory once, none a confirmation of the failed run.
    results = await finish(store, turn_id, memories)
    assert results is not None and [r.status for r in results] == ["added", "added"]
    assert await texts(store) == ["The user likes green tea.", "The user lives in Berlin."]
    assert await store.memory_uses(user_key=ALICE) == {}
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and turn.reflection == "done"


async def test_a_failure_at_the_nth_memory_writes_none_of_them(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    paris = await store.add(
        user_key=ALICE, memory=NewMemory(text="The user lives in Paris."), dedupe=Deduper()
    )
    turn_id = await pending_turn(store)
    real = store._add_one  # type: ignore[attr-defined]
    calls = {"n": 0}

    async def locked_at_the_third(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise StoreError("database is locked")
        return await real(*args, **kwargs)

    monkeypatch.setattr(store, "_add_one", locked_at_the_third)
    memories = [
        learned("The user lives in Berlin.", paris.id),
        learned("The user likes green tea."),
        learned("The user rides a bike."),
    ]
    with pytest.raises(StoreError, match="locked"):
        await finish(store, turn_id, memories)
    assert await texts(store) == ["The user lives in Paris."]  # not superseded either
    assert [e.event for e in await store.history(user_key=ALICE)] == ["added"]
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and turn.reflection == "pending"
    assert await tokens_today(store) == 0
    results = await finish(store, turn_id, memories)
    assert results is not None and [r.status for r in results] == ["added"] * 3
    assert await texts(store) == [
        "The user likes green tea.",
        "The user lives in Berlin.",
        "The user rides a bike.",
    ]
    assert await tokens_today(store) == 30


async def test_a_turn_no_longer_waiting_gets_only_the_usage(store: Store) -> None:
    tea = [learned("The user likes green tea.")]
    # /memory pause while the model ran: set_mode turned the turn off.
    paused = await pending_turn(store)
    await store.set_mode(user_key=ALICE, mode="paused")
    assert await finish(store, paused, tea) is None
    turn = await store.get_turn(turn_id=paused)
    # Left off; the attempt is noted (a run again knows its usage is in).
    assert turn is not None and (turn.reflection, turn.attempts) == ("off", 1)
    assert await texts(store) == [] and await tokens_today(store) == 30
    await store.set_mode(user_key=ALICE, mode="on")
    # Finished already (done), forgotten (gone), or another user's turn: nothing either.
    done = await pending_turn(store)
    assert await finish(store, done, tea) is not None
    assert await finish(store, done, tea) is None
    assert await texts(store) == ["The user likes green tea."]
    bobs = await pending_turn(store, BOB)
    assert await finish(store, bobs, tea, user_key=ALICE) is None
    bob_turn = await store.get_turn(turn_id=bobs)
    assert bob_turn is not None and (bob_turn.reflection, bob_turn.attempts) == ("pending", 0)
    await store.forget_all(user_key=ALICE)
    assert await finish(store, done, tea) is None
    assert await texts(store) == [] and await texts(store, BOB) == []
    assert await tokens_today(store) == 5 * 30  # every call's cost is recorded


async def test_a_full_disk_during_the_step_writes_none_of_it(sqlite_store: SQLiteStore) -> None:
    """The file can grow no more: the first memories fit in its free space, a later one
    needs a new page and SQLite rolls the whole step back."""
    turn_id = await pending_turn(sqlite_store)
    await fill_disk(sqlite_store)
    memories = [
        learned(f"The user keeps note {n}: " + " ".join(f"w{n}t{i}" for i in range(24)) + ".")
        for n in range(40)
    ]
    with pytest.raises(StoreError, match="full") as caught:
        await finish(sqlite_store, turn_id, memories)
    assert storage_failed(caught.value)
    await free_disk(sqlite_store)
    assert await texts(sqlite_store) == [] and await tokens_today(sqlite_store) == 0
    turn = await sqlite_store.get_turn(turn_id=turn_id)
    assert turn is not None and turn.reflection == "pending"
    results = await finish(sqlite_store, turn_id, memories)
    assert results is not None and [r.status for r in results] == ["added"] * len(memories)
    turn = await sqlite_store.get_turn(turn_id=turn_id)
    assert turn is not None and turn.reflection == "done"


@pytest.mark.parametrize("existing", [False, True], ids=["new_user", "known_user"])
async def test_forget_everything_during_a_reflections_write_leaves_none_of_it(
    db_url: str, existing: bool
) -> None:
    # A reflection is inside its write (its first memory added, not committed) when the user
    # forgets everything through another process: whichever commits first, nothing of the
    # user is left, whether the reflection made the user's row or it was there before.
    from core.runtime import open_store

    bot, other = await open_store(db_url), await open_store(db_url)
    try:
        if existing:
            await bot.add(user_key=ALICE, memory=NewMemory(text="The user owns a cat."),
                          dedupe=Deduper())  # fmt: skip
        turn_id = await pending_turn(bot)
        inside, go_on = asyncio.Event(), asyncio.Event()
        real = bot._add_one  # type: ignore[attr-defined]

        async def held(*args: Any, **kwargs: Any) -> Any:
            result = await real(*args, **kwargs)
            inside.set()
            await go_on.wait()
            return result

        bot._add_one = held  # type: ignore[attr-defined]
        writing = asyncio.create_task(
            finish(bot, turn_id, [learned("The user likes tea."), learned("The user owns a van.")])
        )
        await asyncio.wait_for(inside.wait(), 10)
        forgetting = asyncio.create_task(other.forget_all(user_key=ALICE))
        await asyncio.sleep(0.2)  # the forget is at the lock (or past it) by now
        go_on.set()
        await asyncio.wait_for(asyncio.gather(writing, forgetting), 10)
        assert await texts(bot) == [] and await texts(other) == []
        assert await other.get_turn(turn_id=turn_id) is None
    finally:
        await bot.close()
        await other.close()


async def test_forget_everything_of_a_user_never_seen_leaves_no_user_behind(store: Store) -> None:
    before = [u.user_key for u in await store.users()]
    assert await store.forget_all(user_key="slack:T1:UNEVER") == 0
    assert [u.user_key for u in await store.users()] == before


async def test_a_reflection_committing_between_forgets_batches_leaves_nothing(
    sqlite_store: SQLiteStore,
) -> None:
    # SQLite forgets in batches, each its own write: a known user's reflection committing
    # after the memory batches found its turn still there before the turns went first.
    store = sqlite_store
    await store.add(user_key=ALICE, memory=NewMemory(text="The user owns a cat."), dedupe=Deduper())
    turn_id = await pending_turn(store)
    real = store._fetchall  # type: ignore[attr-defined]
    reflecting: list[asyncio.Task[Any]] = []

    async def between(sql: str, *args: Any, **kwargs: Any) -> Any:
        rows = await real(sql, *args, **kwargs)
        if "superseded_by IS NOT NULL" in sql and not reflecting:  # the last batch's query
            reflecting.append(
                asyncio.create_task(finish(store, turn_id, [learned("The user likes tea.")]))
            )
            await asyncio.sleep(0)  # queued for the write lock
        return rows

    store._fetchall = between  # type: ignore[attr-defined]
    await store.forget_all(user_key=ALICE)
    await reflecting[0]
    store._fetchall = real  # type: ignore[attr-defined]
    assert await texts(store) == []
    assert await store.get_turn(turn_id=turn_id) is None


async def test_a_reflection_ending_after_forget_all_leaves_no_user_behind(store: Store) -> None:
    """The user forgot everything while the model ran: the reflection's write finds the turn
    gone and makes no row for the user (its usage is recorded all the same)."""
    turn_id = await pending_turn(store)
    await store.forget_all(user_key=ALICE)
    assert await finish(store, turn_id, [learned("The user likes green tea.")]) is None
    assert ALICE not in [u.user_key for u in await store.users()]
    assert await texts(store) == [] and await tokens_today(store) == 30
