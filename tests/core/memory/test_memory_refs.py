"""The rule every Forget button follows (:mod:`core.memory.refs`): a button proves which
memory it meant, and a stale or old-format one forgets nothing (both backends)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from core.errors import MemoryNotFound, StaleButton
from core.memory.refs import STALE_BUTTON, created_stamp, memory_ref, parse_memory_ref
from core.memory.service import MemoryService
from core.types import Memory

ALICE, BOB = "slack:T1:U1", "discord:42"


def _memory(memory_id: int, created_at: datetime) -> Memory:
    return Memory(
        id=memory_id,
        user_key=ALICE,
        text="The user likes tea.",
        kind="fact",
        category="general",
        source="remember",
        origin="private",
        created_at=created_at,
        updated_at=created_at,
    )


def test_a_ref_names_one_memory_exactly() -> None:
    at = datetime(2026, 12, 2, 6, 0, 0, 123456, tzinfo=UTC)
    memory = _memory(12, at)
    ref = parse_memory_ref(memory_ref(memory))
    assert memory_ref(memory) == "12.1796191200123456" and ref is not None
    assert ref.names(memory)
    # The same instant in another zone is the same memory; a microsecond later is not.
    assert ref.names(replace(memory, created_at=at.astimezone(timezone(timedelta(hours=1)))))
    assert not ref.names(replace(memory, created_at=at + timedelta(microseconds=1)))
    assert not ref.names(replace(memory, id=13))
    # Exact far from the epoch too (no float rounding).
    far = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert created_stamp(far) == 253402300799999999
    assert parse_memory_ref(memory_ref(_memory(2**63 - 1, far))) is not None


@pytest.mark.parametrize(
    "value",
    [
        "12",  # the old format: a bare id proves nothing
        "#12",
        "",
        "12.",
        ".5",
        "0.5",
        "012.5",
        "12.5.6",
        "12.5 ",
        "-12.5",
        "１２.５",  # full-width digits
        "12.5\x00",
        "x" * 5000,
        "9223372036854775808.5",  # past the largest id
        "12.123456789012345678901",
    ],
)
def test_anything_else_is_no_ref(value: str) -> None:
    assert parse_memory_ref(value) is None


async def test_forget_ref_acts_only_on_the_memory_it_was_made_for(service: MemoryService) -> None:
    a = await service.remember(user_key=ALICE, text="The user has a dog.")
    (memory_a,) = await service.list_memories(user_key=ALICE)
    button_a = memory_ref(memory_a)
    await service.forget(user_key=ALICE, memory_id=a.id)
    await service.remember(user_key=ALICE, text="The user plays chess.")
    (memory_b,) = await service.list_memories(user_key=ALICE)

    with pytest.raises(MemoryNotFound) as gone:  # A's button: A is gone, B is not A
        await service.forget_ref(user_key=ALICE, ref=button_a)
    assert not isinstance(gone.value, StaleButton)
    for stale in (str(memory_b.id), f"{memory_b.id}.{created_stamp(memory_b.created_at) - 1}"):
        with pytest.raises(StaleButton) as refused:
            await service.forget_ref(user_key=ALICE, ref=stale)
        assert str(refused.value) == STALE_BUTTON
    with pytest.raises(MemoryNotFound):  # someone else's memory, however well named
        await service.forget_ref(user_key=BOB, ref=memory_ref(memory_b))
    assert await service.count(user_key=ALICE) == 1

    forgotten = await service.forget_ref(user_key=ALICE, ref=memory_ref(memory_b))
    assert forgotten == memory_b
    assert await service.count(user_key=ALICE) == 0
    events = [e.event for e in await service.history(user_key=ALICE)]
    assert events == ["added", "forgotten", "added", "forgotten"]
