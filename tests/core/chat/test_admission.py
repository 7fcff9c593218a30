"""Admission control (:mod:`core.chat.admission`) through the intake, on both backends: the
acknowledgement path never waits for a place, one person's answers come one after another,
another person's answer is not queued behind them, at most ``max_turns`` answer at once.
Order and progress are asserted with events, never with durations."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from core.chat.admission import Admission
from core.chat.intake import Intake, Received
from core.chat.loop import IncomingMessage
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import Harness, dm, harness

DEADLOCK_GUARD_S = 3  # only so that a broken build fails instead of hanging


class GatedPlace:
    """A platform that logs ``first NAME`` at the first delta and ``done NAME`` once shown
    whole; with a gate, it waits for the gate after the first delta (a long answer)."""

    def __init__(self, name: str, log: list[str], *, gate: asyncio.Event | None = None) -> None:
        self.name, self.log, self.gate = name, log, gate
        self.started = asyncio.Event()

    async def shown_reply(self) -> list[str]:
        return []

    async def show(self, deltas: AsyncIterator[str], *, reuse: Sequence[str]) -> None:
        first = True
        async for _ in deltas:
            if first:
                self.log.append(f"first {self.name}")
                self.started.set()
                first = False
                if self.gate is not None:
                    await self.gate.wait()
        self.log.append(f"done {self.name}")

    async def say(self, text: str) -> None:
        raise AssertionError("nothing to say")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=5) as f:
        yield f


@pytest.fixture
async def h(fake: FakeAnthropic, db_url: str) -> AsyncIterator[Harness]:
    async with harness(fake, db_url) as h:
        yield h


async def receive(intake: Intake, message: IncomingMessage) -> Received:
    ref = message.platform_ref
    received = await intake.receive(message, flight_key=f"t:{ref}", claim_keys=[f"t:{ref}"])
    assert received is not None and received.turn_id is not None
    return received


async def until(check: Callable[[], bool]) -> None:
    """Let the other tasks run until ``check()`` holds (each pass is one loop iteration)."""
    async with asyncio.timeout(DEADLOCK_GUARD_S):
        for _ in itertools.count():
            if check():
                return
            await asyncio.sleep(0)


async def test_one_persons_messages_wait_for_each_other_not_for_another_person(
    h: Harness,
) -> None:
    intake = Intake(loop=h.loop, admission=Admission(max_turns=8))
    a1, a2, b1 = (
        dm("a", "first question", platform_ref="a1"),
        dm("a", "second question", platform_ref="a2"),
        dm("b", "my question", platform_ref="b1"),
    )
    got = [await receive(intake, m) for m in (a1, a2, b1)]  # all stored and acked at once
    log: list[str] = []
    gate = asyncio.Event()
    places = [GatedPlace("a1", log, gate=gate), GatedPlace("a2", log), GatedPlace("b1", log)]
    tasks = [
        asyncio.create_task(intake.respond(m, r, p))
        for m, r, p in zip((a1, a2, b1), got, places, strict=True)
    ]
    await until(lambda: "done b1" in log)  # b's answer finished while a's first is held
    assert "first a1" in log and "done a1" not in log
    assert "first a2" not in log  # a's second waits for a's first, whatever the places
    gate.set()
    async with asyncio.timeout(DEADLOCK_GUARD_S):
        await asyncio.gather(*tasks)
    assert log.index("done a1") < log.index("first a2")
    assert log[-1] == "done a2"
    turns = await h.store.recent_turns(conversation_key="dm:a", limit=10)
    assert [t.role for t in turns] == ["user", "user", "assistant", "assistant"]  # both acked first


async def test_acknowledgements_never_wait_for_a_place(h: Harness) -> None:
    admission = Admission(max_turns=1)
    intake = Intake(loop=h.loop, admission=admission)
    a1, b1 = dm("a", "long one", platform_ref="a1"), dm("b", "short", platform_ref="b1")
    log: list[str] = []
    gate = asyncio.Event()
    ra = await receive(intake, a1)
    pa = GatedPlace("a1", log, gate=gate)
    ta = asyncio.create_task(intake.respond(a1, ra, pa))
    async with asyncio.timeout(DEADLOCK_GUARD_S):
        await pa.started.wait()
    rb = await receive(intake, b1)  # stored (so acknowledged) while the only place is held
    tb = asyncio.create_task(intake.respond(b1, rb, GatedPlace("b1", log)))
    await until(lambda: admission.waiting == 1)
    assert log == ["first a1"] and admission.running == 1
    gate.set()
    async with asyncio.timeout(DEADLOCK_GUARD_S):
        await asyncio.gather(ta, tb)
    assert log == ["first a1", "done a1", "first b1", "done b1"]
    assert admission.running == 0 and admission.waiting == 0


async def test_places_go_first_come_first_served_and_survive_cancellation() -> None:
    admission = Admission(max_turns=1)
    order: list[str] = []
    hold = asyncio.Event()

    async def turn(user: str, *, wait: bool = False) -> None:
        async with admission.turn(user):
            order.append(user)
            if wait:
                await hold.wait()

    first = asyncio.create_task(turn("u0", wait=True))
    await until(lambda: admission.running == 1)
    waiting = [asyncio.create_task(turn(f"u{i}")) for i in range(1, 5)]
    await until(lambda: admission.waiting == 4)
    waiting[1].cancel()  # u2 gives up while queued: its place is not lost
    await asyncio.gather(waiting[1], return_exceptions=True)
    hold.set()
    async with asyncio.timeout(DEADLOCK_GUARD_S):
        await asyncio.gather(first, waiting[0], *waiting[2:])
    assert order == ["u0", "u1", "u3", "u4"]
    assert admission.running == 0 and admission.waiting == 0


def test_admission_refuses_no_place() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Admission(max_turns=0)
