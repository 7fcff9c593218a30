"""The recall log (issue 26): how often each memory reached a delivered answer's prompt and
when last, how often a write confirmed it; written in the turn's own transaction, never
failing the turn, and erased with the memory. Both backends."""

from __future__ import annotations

from datetime import timedelta

from core.memory.service import MemoryService
from core.rules.dedupe import Deduper
from core.store.seams import Store
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory, NewTurn, utcnow

ALICE, BOB = "cli:alice", "cli:bob"


async def asked(store: Store, user_key: str = ALICE) -> int:
    return await store.add_turn(
        turn=NewTurn(
            conversation_key=f"{user_key}:session",
            user_key=user_key,
            role="user",
            text="Hello?",
            origin="private",
            sent_at=utcnow(),
            reflection="answering",
        )
    )


async def execute(store: Store, sql: str) -> None:
    """One statement of SQL both backends understand, outside the seams."""
    if isinstance(store, SQLiteStore):
        await store._run(lambda conn: conn.execute(sql))
    else:
        await store._execute(sql)  # type: ignore[attr-defined]


async def test_a_delivered_turn_records_its_users_memories_only(store: Store) -> None:
    service = MemoryService(store)
    tea = (await service.remember(user_key=ALICE, text="The user drinks green tea.")).id
    vim = (await service.remember(user_key=ALICE, text="The user edits code in vim.")).id
    jazz = (await service.remember(user_key=BOB, text="The user likes jazz.")).id
    before = utcnow()
    first = await asked(store)
    # Bob's memory and an unknown id in Alice's prompt ids are ignored.
    await store.finish_turn(turn_id=first, answer="Hi.", recalled=[tea, vim, jazz, 10**9, tea])
    uses = await store.memory_uses(user_key=ALICE)
    assert set(uses) == {tea, vim} and uses[tea].recalls == uses[vim].recalls == 1
    last = uses[tea].last_recalled_at
    assert last is not None and before <= last <= utcnow()
    assert await store.memory_uses(user_key=BOB) == {}
    second = await asked(store)
    await store.finish_turn(turn_id=second, answer="Again.", recalled=[tea])
    uses = await store.memory_uses(user_key=ALICE, memory_ids=[tea])
    assert list(uses) == [tea] and uses[tea].recalls == 2
    assert uses[tea].last_recalled_at is not None and uses[tea].last_recalled_at >= last
    # Recalls never touch the memory itself.
    memory = await store.get(user_key=ALICE, memory_id=tea)
    assert memory is not None and memory.updated_at <= before
    assert store.recall_records_dropped == 0


async def test_a_failed_recall_record_never_fails_the_turn(store: Store) -> None:
    tea = (await MemoryService(store).remember(user_key=ALICE, text="The user drinks tea.")).id
    turn_id = await asked(store)
    await execute(store, "ALTER TABLE memory_uses RENAME TO memory_uses_away")  # records fail
    try:
        answer_id = await store.finish_turn(turn_id=turn_id, answer="Tea it is.", recalled=[tea])
    finally:
        await execute(store, "ALTER TABLE memory_uses_away RENAME TO memory_uses")
    assert answer_id is not None
    answer = await store.answer_to(turn_id=turn_id)
    assert answer is not None and answer.text == "Tea it is."
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and turn.reflection == "pending"
    assert store.recall_records_dropped == 1


async def test_duplicate_writes_confirm_the_stored_memory_imports_do_not(store: Store) -> None:
    service = MemoryService(store)
    tea = (await service.remember(user_key=ALICE, text="The user likes tea.")).id
    assert (await service.remember(user_key=ALICE, text="The user likes tea.")).id == tea
    reflected = NewMemory(text="The user likes tea.", source="reflection")
    assert (await store.add(user_key=ALICE, memory=reflected, dedupe=Deduper())).id == tea
    imported = NewMemory(text="The user likes tea.", source="import")
    await store.add_many(user_key=ALICE, memories=[imported], dedupe=None)
    await store.add_many(user_key=ALICE, memories=[imported], dedupe=Deduper())
    # Two candidates of one write saying the same new thing: said once, confirmed never.
    twice = [NewMemory(text="The user owns a kayak.", source="reflection")] * 2
    results = await store.add_many(user_key=ALICE, memories=twice, dedupe=Deduper())
    uses = await store.memory_uses(user_key=ALICE)
    assert uses[tea].confirmations == 2 and uses[tea].recalls == 0
    assert results[0].id not in uses


async def test_forgetting_erases_the_memory_uses(store: Store) -> None:
    service = MemoryService(store)
    tea = (await service.remember(user_key=ALICE, text="The user likes tea.")).id
    await service.remember(user_key=ALICE, text="The user likes tea.")
    vim = (await service.remember(user_key=ALICE, text="The user edits code in vim.")).id
    jazz = (await service.remember(user_key=BOB, text="The user likes jazz.")).id
    turn_id = await asked(store)
    await store.finish_turn(turn_id=turn_id, answer="ok", recalled=[tea, vim])
    await store.finish_turn(turn_id=await asked(store, BOB), answer="ok", recalled=[jazz])
    await service.forget(user_key=ALICE, memory_id=tea)
    assert set(await store.memory_uses(user_key=ALICE)) == {vim}
    await service.forget_all(user_key=ALICE)
    assert await store.memory_uses(user_key=ALICE) == {}
    assert set(await store.memory_uses(user_key=BOB)) == {jazz}


async def test_the_store_knows_since_when_it_records_recalls(store: Store) -> None:
    # The migration's time: this test's new SQLite file, or this run's PostgreSQL database
    # (made when the run began, which may be a quarter of an hour ago in a full run).
    started = await store.recall_log_started()
    assert started is not None and utcnow() - timedelta(hours=3) < started <= utcnow()
