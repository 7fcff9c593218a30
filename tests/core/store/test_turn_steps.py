"""The store contract for a turn's steps, each one transaction, on SQLite and PostgreSQL alike:
intake (``receive_turn``: the claim and the user's message), the end of a turn
(``finish_turn``: usage, the answer, the reflection queued), a reflection's end
(``set_reflection`` with its usage), and a mode change stopping queued reflections. A step
that fails inside is rolled back whole and its caller gets the error."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import cast

import pytest

from core.errors import StoreError, storage_failed
from core.store.postgres.store import PostgresStore
from core.store.seams import Store
from core.types import CallKind, NewTurn, UsageRecord, utcnow

"""What a failing step raises: PostgreSQL's errors as ``StoreError``, SQLite's driver error."""
ALICE = "slack:T1:U1"
DM = "slack:T1:D1"


def user_turn(text: str, *, ref: str | None = None, role: str = "user") -> NewTurn:
    return NewTurn(
        conversation_key=DM,
        user_key=ALICE,
        role=role,
        text=text,
        origin="private",
        sent_at=utcnow(),
        reflection="answering",
        platform_ref=ref,
        workspace="T1",
    )


def usage(kind: str = "chat", turn_id: int | None = None, tokens: int = 10) -> UsageRecord:
    return UsageRecord(
        user_key=ALICE,
        workspace="T1",
        kind=cast(CallKind, kind),
        model="claude-test",
        input_tokens=tokens,
        output_tokens=2 * tokens,
        cache_read_input_tokens=0,
        cache_creation_input_tokens=0,
        turn_id=turn_id,
    )


async def tokens_today(store: Store) -> int:
    rows = await store.usage_report(since=utcnow() - timedelta(days=1), by="kind")
    return sum(r.total_tokens for r in rows)


async def test_receive_turn_claims_and_stores_once(store: Store) -> None:
    turn_id = await store.receive_turn(claim_keys=["ev1", "D1:1.0"], turn=user_turn("hi"))
    assert turn_id is not None
    stored = await store.get_turn(turn_id=turn_id)
    assert stored is not None and stored.text == "hi" and stored.reflection == "answering"
    # Any key claimed before: nothing written, None.
    assert await store.receive_turn(claim_keys=["D1:1.0", "ev2"], turn=user_turn("again")) is None
    assert await store.claim_event(keys=["ev2"])  # ev2 was not claimed by the refused call
    assert [t.text for t in await store.recent_turns(conversation_key=DM, limit=10)] == ["hi"]
    # Without keys it stores without a claim.
    assert await store.receive_turn(claim_keys=[], turn=user_turn("no keys")) is not None


async def test_receive_turn_of_one_event_at_once_stores_it_once(store: Store) -> None:
    results = await asyncio.gather(
        *(store.receive_turn(claim_keys=["ev", f"alt{i}"], turn=user_turn("x")) for i in range(8))
    )
    assert sum(r is not None for r in results) == 1
    assert len(await store.recent_turns(conversation_key=DM, limit=10)) == 1


async def test_a_failure_inside_receive_turn_rolls_the_claim_back(store: Store) -> None:
    with pytest.raises(StoreError, match=r"(?i)check constraint") as caught:
        await store.receive_turn(claim_keys=["ev"], turn=user_turn("bad", role="bogus"))
    assert storage_failed(caught.value)  # the driver's error or StoreError: the store failed
    assert await store.recent_turns(conversation_key=DM, limit=10) == []
    # The claim went with the message: the redelivery is received.
    assert await store.receive_turn(claim_keys=["ev"], turn=user_turn("good")) is not None


async def test_finish_turn_records_usage_answer_and_reflection_in_one_step(store: Store) -> None:
    asked = await store.receive_turn(claim_keys=["ev"], turn=user_turn("hi"))
    assert asked is not None
    answer_id = await store.finish_turn(
        turn_id=asked, answer="hello", usage=[usage(turn_id=asked), usage("chat", asked, 1)]
    )
    assert answer_id is not None
    answer = await store.answer_to(turn_id=asked)
    assert answer is not None and answer.id == answer_id and answer.text == "hello"
    turn = await store.get_turn(turn_id=asked)
    assert turn is not None and turn.reflection == "pending"
    assert await tokens_today(store) == 33
    assert await store.chat_messages_since(since=utcnow() - timedelta(days=1)) == 2
    # A forgotten turn: no answer, the calls' cost is recorded all the same.
    assert await store.finish_turn(turn_id=10**9, answer="lost", usage=[usage()]) is None
    assert await tokens_today(store) == 63


async def test_a_failure_inside_finish_turn_rolls_back_the_whole_step(store: Store) -> None:
    asked = await store.receive_turn(claim_keys=["ev"], turn=user_turn("hi"))
    assert asked is not None
    with pytest.raises(StoreError, match=r"(?i)check constraint") as caught:
        await store.finish_turn(
            turn_id=asked, answer="hello", usage=[usage(turn_id=asked), usage("bogus")]
        )
    assert storage_failed(caught.value)
    assert await store.answer_to(turn_id=asked) is None
    turn = await store.get_turn(turn_id=asked)
    assert turn is not None and turn.reflection == "answering"
    assert await tokens_today(store) == 0
    # The step can be done again once its data is right.
    assert await store.finish_turn(turn_id=asked, answer="hello", usage=[usage()]) is not None


async def test_set_reflection_records_its_usage_in_the_same_step(store: Store) -> None:
    asked = await store.receive_turn(claim_keys=["ev"], turn=user_turn("hi"))
    assert asked is not None
    await store.finish_turn(turn_id=asked, answer="hello")
    await store.set_reflection(
        turn_id=asked, state="done", attempts=1, usage=[usage("reflection", asked)]
    )
    turn = await store.get_turn(turn_id=asked)
    assert turn is not None and turn.reflection == "done" and turn.attempts == 1
    rows = await store.usage_report(since=utcnow() - timedelta(days=1), by="kind")
    assert [(r.key, r.total_tokens) for r in rows] == [("reflection", 30)]
    with pytest.raises(StoreError, match=r"(?i)check constraint") as caught:
        await store.set_reflection(turn_id=asked, state="skipped", usage=[usage("bogus")])
    assert storage_failed(caught.value)
    turn = await store.get_turn(turn_id=asked)
    assert turn is not None and turn.reflection == "done"


async def test_leaving_mode_on_stops_the_users_queued_reflections(store: Store) -> None:
    answering = await store.receive_turn(claim_keys=["a"], turn=user_turn("one"))
    pending = await store.receive_turn(claim_keys=["b"], turn=user_turn("two"))
    assert answering is not None and pending is not None
    await store.finish_turn(turn_id=pending, answer="ok")
    other = await store.add_turn(
        turn=NewTurn(
            conversation_key="slack:T1:D9",
            user_key="slack:T1:U9",
            role="user",
            text="not alice",
            origin="private",
            sent_at=utcnow(),
            reflection="answering",
        )
    )
    await store.set_mode(user_key=ALICE, mode="paused")
    for turn_id in (answering, pending):
        turn = await store.get_turn(turn_id=turn_id)
        assert turn is not None and turn.reflection == "off"
    # The answer that was streaming meanwhile is stored; its reflection stays off.
    await store.finish_turn(turn_id=answering, answer="late", reflect=True)
    turn = await store.get_turn(turn_id=answering)
    assert turn is not None and turn.reflection == "off"
    assert await store.answer_to(turn_id=answering) is not None
    # Another user's turn is untouched; mode back on restores nothing.
    await store.set_mode(user_key=ALICE, mode="on")
    kept = await store.get_turn(turn_id=other)
    assert kept is not None and kept.reflection == "answering"
    again = await store.get_turn(turn_id=pending)
    assert again is not None and again.reflection == "off"


async def test_mark_once_is_true_once_and_a_repeat_writes_nothing(store: Store) -> None:
    assert await store.mark_once(mark="notice:1")
    assert not await store.mark_once(mark="notice:1")
    results = await asyncio.gather(*(store.mark_once(mark="notice:2") for _ in range(5)))
    assert sorted(results) == [False, False, False, False, True]


async def test_two_replicas_receiving_one_event_at_once_store_it_once(pg_url: str) -> None:
    first, second = await PostgresStore.open(pg_url), await PostgresStore.open(pg_url)
    try:
        results = await asyncio.gather(
            *(
                (first, second)[i % 2].receive_turn(
                    claim_keys=["T1:ev9", f"D1:{i % 3}", "D1:9.0"], turn=user_turn(f"try {i}")
                )
                for i in range(12)
            )
        )
        assert sum(r is not None for r in results) == 1
        assert len(await first.recent_turns(conversation_key=DM, limit=20)) == 1
        # The event stays claimed for both.
        assert not await second.claim_event(keys=["T1:ev9"])
    finally:
        await first.close()
        await second.close()
