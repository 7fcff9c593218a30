"""Composition: the chat runtime's collaborators are wired at construction, and the adapter's
handler for what reflection learns is given when the runtime starts (before resumed work)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from core.memory.reflection import ReflectionResult
from core.runtime import ChatRuntime, open_runtime, open_store
from core.types import NewTurn, utcnow
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import memories_reply, settings_for

ALICE = "slack:T1:UALICE"


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=3) as f:
        yield f


async def leave_a_pending_reflection(db_url: str) -> int:
    """What a process killed after answering leaves: a user turn whose reflection is pending."""
    store = await open_store(db_url)
    try:
        turn = NewTurn(
            conversation_key=f"dm:{ALICE}",
            user_key=ALICE,
            role="user",
            text="I moved to Lisbon last month.",
            origin="private",
            sent_at=utcnow(),
            reflection="answering",
        )
        turn_id = await store.add_turn(turn=turn)
        assert await store.finish_turn(turn_id=turn_id, answer="Welcome to Lisbon!") is not None
        return turn_id
    finally:
        await store.close()


async def test_a_resumed_reflection_is_reported_to_the_handler_given_at_start(
    fake: FakeAnthropic, db_url: str
) -> None:
    turn_id = await leave_a_pending_reflection(db_url)
    fake.enqueue(memories_reply(("The user lives in Lisbon.", "fact", "general")), kind="extract")
    learned: list[ReflectionResult] = []

    async def on_learned(result: ReflectionResult) -> None:
        learned.append(result)

    settings = settings_for(fake, db_url)
    async with open_runtime(settings, db_url=db_url, require_model=True, start=False) as rt:
        assert isinstance(rt, ChatRuntime)
        assert fake.requests_of("extract") == []  # start=False: nothing resumed yet
        await rt.start(on_learned=on_learned)
        assert await rt.reflector.drain(10)
        await rt.start(on_learned=None)  # a second start does nothing (no second resume)
    assert [r.turn.id for r in learned] == [turn_id]
    assert [m.text for m in learned[0].added] == ["The user lives in Lisbon."]
    assert len(fake.requests_of("extract")) == 1


async def test_a_failing_handler_never_fails_the_reflection(
    fake: FakeAnthropic, db_url: str
) -> None:
    await leave_a_pending_reflection(db_url)
    fake.enqueue(memories_reply(("The user lives in Lisbon.", "fact", "general")), kind="extract")

    async def on_learned(result: ReflectionResult) -> None:
        raise RuntimeError("the platform is down")

    settings = settings_for(fake, db_url)
    async with open_runtime(settings, db_url=db_url, require_model=True, start=False) as rt:
        await rt.start(on_learned=on_learned)
        assert await rt.reflector.drain(10)
        memories = await rt.service.list_memories(user_key=ALICE)
        assert await rt.store.turns_to_reflect() == []  # marked done, not retried
    assert [m.text for m in memories] == ["The user lives in Lisbon."]


async def test_the_startup_heap_is_frozen_once_a_runtime_is_open(
    fake: FakeAnthropic, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once per process, when a chat runtime is open and before it serves: a full
    collection then no longer walks what start-up made. A runtime without the model (a
    memory command, over in a moment) does not pay for the collection."""
    import core.runtime

    frozen: list[str] = []
    monkeypatch.setattr(core.runtime, "_frozen", False)
    monkeypatch.setattr(core.runtime.gc, "freeze", lambda: frozen.append("freeze"))
    settings = settings_for(fake, db_url)
    async with open_runtime(settings, db_url=db_url, require_model=True, start=True) as rt:
        assert isinstance(rt, ChatRuntime)
        assert frozen == ["freeze"]
    async with open_runtime(settings, db_url=db_url, start=False):
        pass
    assert frozen == ["freeze"]  # once per process
    monkeypatch.setattr(core.runtime, "_frozen", False)
    async with open_runtime(settings.model_copy(update={"anthropic_api_key": None}), db_url=db_url):
        pass
    assert frozen == ["freeze"]  # no model: a short command, nothing frozen
