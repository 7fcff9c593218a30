"""Exactly once at every crash point, on both store backends (docs/operating.md, "Crash
points"): a recovery that dies with its process is recovered at the next start (the claim
outlives no process that held it), never by two live processes at once; a turn's reflection
starts only once its answer was delivered, and never after an answer that finally failed.

A "process" here is a harness over the same database; its death is what a SIGKILL leaves:
PostgreSQL drops its connections and with them its liveness lock, a SQLite store object (the
process's generation) is gone. The adapters' end-to-end crash tests run real processes:
tests/bots/slack_bot/test_slack_process.py and bench/soak_kill.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import pytest

from core.chat.intake import Intake, Received
from core.errors import ModelError
from core.store.postgres.store import PostgresStore
from core.types import utcnow
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.loop_helpers import Harness, dm, harness, memories_reply
from tests.store_helpers import pending_turn

FACT = "The user lives in Porto."


class Place:
    """A platform that records what it shows. ``fail``: ``show`` raises after the first
    delta (a platform error); ``hang``: it stops after the first delta until cancelled (the
    process is killed mid-answer)."""

    def __init__(
        self, *, left: Sequence[str] = (), fail: bool = False, hang: asyncio.Event | None = None
    ) -> None:
        self.left = list(left)
        self.fail = fail
        self.hang = hang
        self.shown: list[tuple[str, list[str]]] = []

    async def shown_reply(self) -> list[str]:
        return self.left

    async def show(self, deltas: AsyncIterator[str], *, reuse: Sequence[str]) -> None:
        parts: list[str] = []
        try:
            async for delta in deltas:
                parts.append(delta)
                if self.fail:
                    raise ConnectionError("the platform went away")
                if self.hang is not None:
                    self.hang.set()
                    await asyncio.Event().wait()
        except ModelError as exc:  # as core.streaming.reply shows it: the note, no raise
            parts.append(exc.user_message)
        self.shown.append(("".join(parts), list(reuse)))

    async def say(self, text: str) -> None:
        raise AssertionError(f"nothing to say: {text}")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=5) as f:
        yield f


async def die(h: Harness) -> None:
    """The process behind ``h`` is killed (SIGKILL): nothing of it runs any more."""
    await h.reflector.close()
    store = h.store
    if isinstance(store, PostgresStore):  # the server drops its sessions and their locks
        store._session.terminate()
        store._pool.terminate()
        store._intake.terminate()
    else:
        await store.close()


async def answers(h: Harness, conversation_key: str) -> list[tuple[str, str]]:
    turns = await h.store.recent_turns(conversation_key=conversation_key, limit=10)
    return [(t.role, t.text) for t in turns]


async def crash_mid_answer(fake: FakeAnthropic, db_url: str, text: str, ref: str) -> int:
    """A first process stores ``text`` and dies while its answer streams (a platform error
    stands in for the kill: both leave the stored turn ``answering`` with no answer)."""
    async with harness(fake, db_url) as h:
        intake = Intake(loop=h.loop)
        fake.enqueue("A first try that never ends on screen.", kind="chat")
        message = dm("u1", text, platform_ref=ref)
        received = await intake.receive(message, flight_key=ref, claim_keys=[ref])
        assert received is not None and received.turn_id is not None
        with pytest.raises(ConnectionError):
            await intake.respond(message, received, Place(fail=True))
        return received.turn_id


async def test_a_recovery_that_dies_is_recovered_again_and_answered_once(
    fake: FakeAnthropic, db_url: str, backend: str
) -> None:
    message = dm("u1", "plan my week", platform_ref="m1")
    turn_id = await crash_mid_answer(fake, db_url, message.text, "m1")

    # Second process: claims the recovery and dies while the recovered answer streams.
    async with harness(fake, db_url) as second:
        intake = Intake(loop=second.loop)
        [turn] = await intake.unanswered(conversation_prefix="dm:")
        assert turn.id == turn_id
        received = await intake.recovered(turn, flight_key="m1")
        assert received == Received(turn_id=turn_id, flight_key="m1", resume=True)
        assert await Intake(loop=second.loop).recovered(turn, flight_key="m1") is None
        fake.enqueue("Monday: rest. Tuesday: work. Wednesday: more.", kind="chat")
        streaming = asyncio.Event()
        task = asyncio.create_task(
            intake.respond(message, received, Place(left=["p1"], hang=streaming))
        )
        await asyncio.wait_for(streaming.wait(), 10)
        if backend == "postgres":
            # While it lives, no other replica takes its recovery.
            async with harness(fake, db_url) as other:
                assert await Intake(loop=other.loop).recovered(turn, flight_key="m1") is None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await die(second)

    # Third process: the claim died with the second; recovered, into what is on screen.
    async with harness(fake, db_url) as third:
        intake = Intake(loop=third.loop)
        [turn] = await intake.unanswered(conversation_prefix="dm:")
        received = await intake.recovered(turn, flight_key="m1")
        assert received == Received(turn_id=turn_id, flight_key="m1", resume=True)
        fake.enqueue("Monday: rest. Tuesday: work.", kind="chat")
        place = Place(left=["p1", "p2"])
        await intake.respond(message, received, place)
        assert place.shown == [("Monday: rest. Tuesday: work.", ["p1", "p2"])]
        assert await answers(third, "dm:u1") == [
            ("user", "plan my week"),
            ("assistant", "Monday: rest. Tuesday: work."),
        ]
        assert await intake.unanswered(conversation_prefix="dm:") == []
    # A fourth start finds nothing to answer.
    async with harness(fake, db_url) as fourth:
        assert await Intake(loop=fourth.loop).unanswered(conversation_prefix="dm:") == []
    assert len(fake.requests_of("chat")) == 3


async def test_replicas_racing_for_a_dead_ones_recovery_take_it_once(
    fake: FakeAnthropic, pg_url: str
) -> None:
    turn_id = await crash_mid_answer(fake, pg_url, "where was I?", "m2")
    async with harness(fake, pg_url) as dead:
        assert await dead.store.claim_recovery(turn_id=turn_id)
        await die(dead)
    async with harness(fake, pg_url) as a, harness(fake, pg_url) as b:
        for _ in range(5):
            won = await asyncio.gather(
                a.store.claim_recovery(turn_id=turn_id), b.store.claim_recovery(turn_id=turn_id)
            )
            assert sorted(won) in ([False, False], [False, True])
        assert await a.store.claim_recovery(turn_id=turn_id) is False
        assert await b.store.claim_recovery(turn_id=turn_id) is False


async def test_reflection_waits_for_the_recovered_answer_and_reads_it(
    fake: FakeAnthropic, db_url: str
) -> None:
    message = dm("u1", "I moved to Porto last month.", platform_ref="m3")
    turn_id = await crash_mid_answer(fake, db_url, message.text, "m3")
    async with harness(fake, db_url) as h:  # start-up: reflections resume first
        assert await h.reflector.drain(10)
        assert fake.requests_of("extract") == []  # not before its answer
        turn = await h.store.get_turn(turn_id=turn_id)
        assert turn is not None and turn.reflection == "answering"
        intake = Intake(loop=h.loop)
        [turn] = await intake.unanswered(conversation_prefix="dm:")
        received = await intake.recovered(turn, flight_key="m3")
        assert received is not None
        fake.enqueue("Welcome to Porto!", kind="chat")
        fake.enqueue(memories_reply((FACT, "fact", "general")), kind="extract")
        await intake.respond(message, received, Place())
        assert await h.reflector.drain(10)
        [extract] = fake.requests_of("extract")
        assert "Welcome to Porto!" in str(extract.body)  # the exchange, answer included
        assert [m.text for m in await h.service.list_memories(user_key="u1")] == [FACT]
        turn = await h.store.get_turn(turn_id=turn_id)
        assert turn is not None and turn.reflection == "done"


async def test_a_recovered_answer_that_fails_is_never_reflected(
    fake: FakeAnthropic, db_url: str
) -> None:
    message = dm("u1", "I moved to Porto last month.", platform_ref="m4")
    turn_id = await crash_mid_answer(fake, db_url, message.text, "m4")
    fake.enqueue(memories_reply((FACT, "fact", "general")), kind="extract")  # never asked for
    async with harness(fake, db_url) as h:
        intake = Intake(loop=h.loop)
        [turn] = await intake.unanswered(conversation_prefix="dm:")
        received = await intake.recovered(turn, flight_key="m4")
        assert received is not None
        fake.enqueue(Reply(status=400, error_type="invalid_request_error"), kind="chat")
        place = Place()
        await intake.respond(message, received, place)
        assert place.shown == [("Claude refused the request.", [])]
        assert await h.reflector.drain(10)
        turn = await h.store.get_turn(turn_id=turn_id)
        assert turn is not None and turn.reflection == "off"
        assert await h.store.turns_to_reflect() == []
    async with harness(fake, db_url) as h:  # and not at the next start either
        assert await h.reflector.drain(10)
        assert await h.service.list_memories(user_key="u1") == []
    assert fake.requests_of("extract") == []


async def test_a_message_never_answered_is_pruned_with_the_history_it_belongs_to(
    fake: FakeAnthropic, db_url: str
) -> None:
    """Never reflected (its answer never came), so nothing waits for it: it goes at the
    history's retention like any answered turn, while a delivered one's reflection keeps it."""
    lost = await crash_mid_answer(fake, db_url, "plan my week", "m5")
    async with harness(fake, db_url) as h:
        waiting = await pending_turn(h.store, "u2")
        await h.reflector.close()  # its reflection not run yet
        # The unanswered message and the answered one's answer go; the one waiting stays.
        assert await h.store.prune_turns(older_than=utcnow() + timedelta(days=1)) == 2
        assert await h.store.get_turn(turn_id=lost) is None
        kept = await h.store.get_turn(turn_id=waiting)
        assert kept is not None and kept.reflection == "pending"


async def test_a_redelivery_while_a_live_process_recovers_the_message_is_dropped(
    fake: FakeAnthropic, db_url: str, backend: str
) -> None:
    """Slack retries an event whose acknowledgement a kill lost, maybe to another replica,
    while the restarted process's start-up recovery answers the same stored message: one of
    them answers it. A redelivery of a message whose recovery died is answered."""
    message = dm("u1", "what now?", platform_ref="m6")
    turn_id = await crash_mid_answer(fake, db_url, message.text, "m6")
    async with harness(fake, db_url) as a:
        [turn] = await Intake(loop=a.loop).unanswered(conversation_prefix="dm:")
        assert await Intake(loop=a.loop).recovered(turn, flight_key="a:m6") is not None
        if backend == "postgres":  # the retry reaches another live replica
            async with harness(fake, db_url) as b:
                again = Intake(loop=b.loop)
                assert await again.receive(message, flight_key="m6", claim_keys=["m6"]) is None
        else:  # one process owns the file: the retry reaches it
            again = Intake(loop=a.loop)
            assert await again.receive(message, flight_key="m6", claim_keys=["m6"]) is None
        await die(a)
    async with harness(fake, db_url) as c:  # the recovery died: the next retry answers it
        intake = Intake(loop=c.loop)
        received = await intake.receive(message, flight_key="m6", claim_keys=["m6"])
        assert received is not None and received.resume and received.turn_id == turn_id


async def test_a_redelivery_racing_the_start_up_recovery_in_one_process_is_answered_once(
    fake: FakeAnthropic, db_url: str
) -> None:
    """The bot listens before its start-up recovery claims: a retry of the same message
    arriving meanwhile and the recovery must not both step aside (nor both answer)."""
    message = dm("u1", "what now?", platform_ref="m7")
    turn_id = await crash_mid_answer(fake, db_url, message.text, "m7")
    async with harness(fake, db_url) as h:
        intake = Intake(loop=h.loop)
        [turn] = await intake.unanswered(conversation_prefix="dm:")
        outcomes = await asyncio.gather(
            intake.recovered(turn, flight_key="m7"),
            intake.receive(message, flight_key="m7", claim_keys=["m7"]),
        )
        [received] = [o for o in outcomes if o is not None]
        assert received.turn_id == turn_id and received.resume
        fake.enqueue("This.", kind="chat")
        await intake.respond(message, received, Place())
        assert await answers(h, "dm:u1") == [("user", "what now?"), ("assistant", "This.")]
