"""The one message intake (:mod:`core.chat.intake`) on both store backends, with a recording
:class:`core.chat.intake.ReplyPlace`: claimed once, stored before the acknowledgement,
stored when shown (not when the platform fails), recovered at start-up once, an interrupted
answer shown into what it left. The adapters' end-to-end tests: tests/test_slack_intake.py,
tests/test_discord_recovery.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from core.chat.intake import Intake, Received
from core.errors import IntakeFailed
from core.store.sqlite.store import SQLiteStore
from core.types import utcnow
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import Harness, dm, harness


class Place:
    """A platform that records what it was asked to show; ``fail`` makes ``show`` raise
    after the first delta (a platform error mid-answer)."""

    def __init__(
        self, *, left: Sequence[str] = (), fail: bool = False, fail_at_end: bool = False
    ) -> None:
        self.left = list(left)
        self.fail = fail
        self.fail_at_end = fail_at_end
        self.shown: list[tuple[str, list[str]]] = []
        self.said: list[str] = []

    async def shown_reply(self) -> list[str]:
        return self.left

    async def show(self, deltas: AsyncIterator[str], *, reuse: Sequence[str]) -> None:
        parts: list[str] = []
        async for delta in deltas:
            parts.append(delta)
            if self.fail:
                raise ConnectionError("the platform went away")
        if self.fail_at_end:  # the whole answer streamed, its final edit refused
            raise ConnectionError("the final edit failed")
        self.shown.append(("".join(parts), list(reuse)))

    async def say(self, text: str) -> None:
        self.said.append(text)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=5) as f:
        yield f


@pytest.fixture
async def h(fake: FakeAnthropic, db_url: str) -> AsyncIterator[Harness]:
    async with harness(fake, db_url) as h:
        yield h


async def answers(h: Harness, conversation_key: str) -> list[tuple[str, str]]:
    turns = await h.store.recent_turns(conversation_key=conversation_key, limit=10)
    return [(t.role, t.text) for t in turns]


async def chat_calls(h: Harness) -> int:
    return await h.store.chat_messages_since(since=utcnow() - timedelta(days=1))


async def test_claimed_once_stored_before_the_answer_and_stored_when_shown(
    h: Harness, fake: FakeAnthropic
) -> None:
    intake = Intake(loop=h.loop)
    message = dm("u1", "hello \x00there 🤖", platform_ref="m1")
    fake.enqueue("Hi there.", kind="chat")
    received = await intake.receive(message, flight_key="t:m1", claim_keys=["t:m1"])
    assert received is not None and received.turn_id is not None and not received.resume
    assert await answers(h, "dm:u1") == [("user", "hello there 🤖")]  # stored, cleaned
    # A duplicate while in flight, then after the answer: nothing to do.
    assert await intake.receive(message, flight_key="t:m1", claim_keys=["t:m1"]) is None
    place = Place()
    await intake.respond(message, received, place, notice="Note. ", notice_mark="n:u1")
    assert place.shown == [("Note. Hi there.", [])]
    assert await answers(h, "dm:u1") == [("user", "hello there 🤖"), ("assistant", "Hi there.")]
    assert await intake.receive(message, flight_key="t:m1", claim_keys=["t:m1"]) is None
    assert not await intake.once("n:u1")  # the notice was shown once
    assert len(fake.requests_of("chat")) == 1
    assert await chat_calls(h) == 1  # its usage stored with the answer


async def test_a_platform_error_leaves_it_unanswered_and_start_up_answers_it_in_place(
    h: Harness, fake: FakeAnthropic
) -> None:
    intake = Intake(loop=h.loop)
    message = dm("u1", "plan my week", platform_ref="m2")
    fake.enqueue("Monday: rest.", "Monday: rest. Tuesday: work.", kind="chat")
    received = await intake.receive(message, flight_key="t:m2", claim_keys=["t:m2"])
    assert received is not None
    with pytest.raises(ConnectionError):
        await intake.respond(message, received, Place(fail=True))
    assert await answers(h, "dm:u1") == [("user", "plan my week")]  # shown in part only
    [turn] = await intake.unanswered(conversation_prefix="dm:")
    assert await intake.unanswered(conversation_prefix="slack:") == []
    # The start-up of a new process: recovered once (also across replicas), into what it left.
    restarted = Intake(loop=h.loop)
    again = await restarted.recovered(turn, flight_key="t:m2")
    assert again == Received(turn_id=turn.id, flight_key="t:m2", resume=True)
    assert await Intake(loop=h.loop).recovered(turn, flight_key="t:m2") is None
    place = Place(left=["p1", "p2"])
    await restarted.respond(message, again, place)
    assert place.shown == [("Monday: rest. Tuesday: work.", ["p1", "p2"])]
    assert await answers(h, "dm:u1") == [
        ("user", "plan my week"),
        ("assistant", "Monday: rest. Tuesday: work."),
    ]
    assert await intake.unanswered(conversation_prefix="dm:") == []
    # A late redelivery of the same message: answered already, nothing shown.
    assert await restarted.receive(message, flight_key="t:m2", claim_keys=["t:m2"]) is None


async def test_a_failed_final_edit_leaves_it_unanswered_and_records_what_the_call_cost(
    h: Harness, fake: FakeAnthropic
) -> None:
    intake = Intake(loop=h.loop)
    message = dm("u1", "sum it up", platform_ref="m9")
    fake.enqueue("All done.", kind="chat")
    received = await intake.receive(message, flight_key="t:m9", claim_keys=["t:m9"])
    assert received is not None
    with pytest.raises(ConnectionError, match="final edit"):
        await intake.respond(message, received, Place(fail_at_end=True))
    assert await answers(h, "dm:u1") == [("user", "sum it up")]  # not stored: not shown
    assert await chat_calls(h) == 1  # the call's usage is, for the daily caps


async def test_a_redelivery_of_an_interrupted_message_answers_the_stored_turn(
    h: Harness, fake: FakeAnthropic
) -> None:
    message = dm("u1", "what now?", platform_ref="m3")
    first = await Intake(loop=h.loop).receive(message, flight_key="t:m3", claim_keys=["t:m3"])
    assert first is not None  # ... and the process dies before answering
    fake.enqueue("This.", kind="chat")
    later = Intake(loop=h.loop)  # the next process, the platform redelivers
    received = await later.receive(message, flight_key="t:m3", claim_keys=["t:m3"])
    assert received is not None and received.resume and received.turn_id == first.turn_id
    place = Place()
    await later.respond(message, received, place)
    assert place.shown == [("This.", [])]
    assert await answers(h, "dm:u1") == [("user", "what now?"), ("assistant", "This.")]


async def test_a_refusal_is_one_line_said_once_and_nothing_stored(h: Harness) -> None:
    intake = Intake(loop=h.loop)
    message = dm("u9", "hi", platform_ref="m4")
    received = await intake.receive(
        message, flight_key="t:m4", claim_keys=["t:m4"], say="Not enabled here."
    )
    assert received is not None
    place = Place()
    await intake.respond(message, received, place)
    assert place.said == ["Not enabled here."] and place.shown == []
    assert await intake.receive(message, flight_key="t:m4", claim_keys=["t:m4"], say="x") is None
    assert await answers(h, "dm:u9") == []


async def test_a_store_that_cannot_write_raises_intake_failed_and_keeps_nothing_half(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    async with harness(fake, tmp_path / "m.db") as h:
        assert isinstance(h.store, SQLiteStore)
        intake = Intake(loop=h.loop)
        await h.store._conn.execute("PRAGMA query_only = 1")  # every write fails
        message = dm("u1", "remember this", platform_ref="m5")
        with pytest.raises(IntakeFailed):
            await intake.receive(message, flight_key="t:m5", claim_keys=["t:m5"])
        await h.store._conn.execute("PRAGMA query_only = 0")
        # Not acknowledged, so redelivered: now it is claimed and stored.
        received = await intake.receive(message, flight_key="t:m5", claim_keys=["t:m5"])
        assert received is not None and not received.resume
        assert await answers(h, "dm:u1") == [("user", "remember this")]
