"""Turn ids are never reused: a deleted turn's id is never given to a new turn, on either
backend, also after a restart and for a store made before SQLite's m016 (which rebuilt
``turns`` with AUTOINCREMENT). An answer in flight, a queued reflection, a recovery claim
and usage rows name a turn by id: a reused id would hand them to another user's message."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.runtime import open_store
from core.store.migrations import Migration
from core.store.seams import Store
from core.store.sqlite import base as sqlite_base
from core.store.sqlite.store import SQLiteStore
from core.types import NewTurn, utcnow
from tests.core.store.test_memory_ids import assert_rebuilt_as_new
from tests.core.store.test_turn_steps import usage

ALICE, BOB = "cli:alice", "cli:bob"


def asked(user_key: str, text: str) -> NewTurn:
    return NewTurn(
        conversation_key=f"{user_key}:session",
        user_key=user_key,
        role="user",
        text=text,
        origin="private",
        sent_at=utcnow(),
        reflection="answering",
    )


async def test_an_answer_in_flight_never_lands_on_a_new_turn_after_forget_all(
    store: Store,
) -> None:
    # Alice's message is the newest turn; she forgets everything while its answer streams,
    # then Bob writes. Alice's answer must find her turn gone, not Bob's message.
    alice = await store.add_turn(turn=asked(ALICE, "Plan my trip to Oslo."))
    await store.forget_all(user_key=ALICE)
    bob = await store.add_turn(turn=asked(BOB, "What is a monad?"))
    assert bob > alice
    assert await store.finish_turn(turn_id=alice, answer="Alice's Oslo plan.") is None
    assert await store.answer_to(turn_id=bob) is None
    turn = await store.get_turn(turn_id=bob)
    assert turn is not None and turn.user_key == BOB and turn.reflection == "answering"


async def test_turn_ids_stay_used_across_a_restart(db_url: str) -> None:
    store = await open_store(db_url)
    ids = [await store.add_turn(turn=asked(ALICE, f"message {n}")) for n in range(3)]
    await store.forget_all(user_key=ALICE)  # the largest ids go
    await store.close()
    store = await open_store(db_url)
    try:
        new = await store.add_turn(turn=asked(BOB, "hello"))
    finally:
        await store.close()
    assert new > ids[-1]


TURN_IDS = "m016_turn_ids_never_reused"


def _before_turn_ids() -> list[Migration]:
    return [m for m in sqlite_base.MIGRATIONS if m[1] != TURN_IDS]


async def test_the_turn_ids_migration_rebuilds_an_existing_store_keeping_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "old.db")
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_base, "MIGRATIONS", _before_turn_ids())
        old = await SQLiteStore.open(path)
        first = await old.add_turn(turn=asked(BOB, "Hi there."))
        await old.finish_turn(turn_id=first, answer="Hello Bob.", reflect=False)
        waiting = await old.add_turn(turn=asked(BOB, "And the weather?"))
        await old.finish_turn(turn_id=waiting, answer="Sunny.")  # its reflection queued
        top = await old.add_turn(turn=asked(ALICE, "Plan my trip to Oslo."))
        # Named beyond the table's largest id: usage of a turn deleted since, a recovery claim.
        await old.record_usage(usage=usage(turn_id=top + 5))
        assert await old.claim_event(keys=[f"recover:{top + 9}"])
        await old.forget_all(user_key=ALICE)  # the largest turn id: named only elsewhere
        before = await old.recent_turns(conversation_key=f"{BOB}:session", limit=10)
        await old.close()
    store = await SQLiteStore.open(path)
    try:
        assert TURN_IDS in await store.applied_migrations()
        assert await store.recent_turns(conversation_key=f"{BOB}:session", limit=10) == before
        assert [t.id for t in await store.turns_to_reflect()] == [waiting]
        new = await store.add_turn(turn=asked(BOB, "One more."))
        assert new == top + 10  # after every turn id the store has named
        assert await store.finish_turn(turn_id=new, answer="Sure.") == new + 1
    finally:
        await store.close()
    await assert_rebuilt_as_new(path, tmp_path / "fresh.db", "turns")
