"""Pending actions (cleanup plans, single-use confirmations) in the store, on both backends:
taken once, by their owner, before they expire; erased with the user's memories."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from core.errors import PlanNotPending
from core.memory.service import CONFIRM_GONE, MemoryService
from core.store.postgres.store import PostgresStore
from core.store.seams import Store
from core.types import utcnow

ALICE, BOB = "cli:alice", "cli:bob"


async def test_taken_once_by_its_owner_before_it_expires(store: Store) -> None:
    now = utcnow()
    later = now + timedelta(minutes=5)
    await store.put_pending(
        token="t1", user_key=ALICE, kind="k", payload='{"a": 1}', expires_at=later
    )
    assert await store.pending_owner(token="t1", kind="k", now=now) == ALICE
    assert await store.take_pending(token="t1", user_key=BOB, kind="k", now=now) is None
    assert await store.take_pending(token="t1", user_key=ALICE, kind="other", now=now) is None
    assert await store.take_pending(token="t1", user_key=ALICE, kind="k", now=later) is None
    assert await store.take_pending(token="t1", user_key=ALICE, kind="k", now=now) == '{"a": 1}'
    assert await store.take_pending(token="t1", user_key=ALICE, kind="k", now=now) is None
    assert await store.pending_owner(token="t1", kind="k", now=now) is None


async def test_replace_drops_the_users_earlier_ones_of_that_kind(store: Store) -> None:
    now, later = utcnow(), utcnow() + timedelta(minutes=5)
    for token, user, kind in (("a", ALICE, "k"), ("b", ALICE, "j"), ("c", BOB, "k")):
        await store.put_pending(
            token=token, user_key=user, kind=kind, payload=token, expires_at=later
        )
    await store.put_pending(
        token="d", user_key=ALICE, kind="k", payload="d", expires_at=later, replace=True
    )
    assert await store.pending_owner(token="a", kind="k", now=now) is None
    assert await store.pending_owner(token="b", kind="j", now=now) == ALICE
    assert await store.pending_owner(token="c", kind="k", now=now) == BOB
    await store.drop_pending(token="d")
    assert await store.pending_owner(token="d", kind="k", now=now) is None
    await store.drop_pending(token="d")  # already gone: nothing happens


async def test_forget_all_erases_the_users_pending_actions(store: Store) -> None:
    later = utcnow() + timedelta(minutes=5)
    await store.put_pending(token="p", user_key=ALICE, kind="k", payload="text", expires_at=later)
    await store.put_pending(token="q", user_key=BOB, kind="k", payload="text", expires_at=later)
    await store.forget_all(user_key=ALICE)
    assert await store.pending_owner(token="p", kind="k", now=utcnow()) is None
    assert await store.pending_owner(token="q", kind="k", now=utcnow()) == BOB


@pytest.mark.parametrize("token", ["", "x" * 5000, "'; DROP TABLE memories; --", "\u202e"])
async def test_odd_tokens_find_nothing(store: Store, token: str) -> None:
    assert await store.take_pending(token=token, user_key=ALICE, kind="k", now=utcnow()) is None


@pytest.mark.parametrize("token", ["", "x" * 5000, "abc\x00defghij", "confirm", "ünïcødé-tøken"])
async def test_forged_confirmations_forget_nothing(service: MemoryService, token: str) -> None:
    await service.remember(user_key=ALICE, text="The user drinks green tea.")
    await service.confirm_forget_all(user_key=ALICE)
    with pytest.raises(PlanNotPending):
        await service.forget_all_confirmed(user_key=ALICE, token=token)
    assert await service.count(user_key=ALICE) == 1


async def test_a_forget_everything_confirmation_acts_once(service: MemoryService) -> None:
    await service.remember(user_key=ALICE, text="The user drinks green tea.")
    token = await service.confirm_forget_all(user_key=ALICE)
    with pytest.raises(PlanNotPending, match="already used"):
        await service.forget_all_confirmed(user_key=BOB, token=token)  # not Bob's
    assert await service.forget_all_confirmed(user_key=ALICE, token=token) == 1
    await service.remember(user_key=ALICE, text="The user runs Arch.")
    with pytest.raises(PlanNotPending) as replay:
        await service.forget_all_confirmed(user_key=ALICE, token=token)
    assert str(replay.value) == CONFIRM_GONE
    assert await service.count(user_key=ALICE) == 1


async def test_two_replicas_taking_one_token_at_once_one_wins(pg_url: str) -> None:
    a, b = await PostgresStore.open(pg_url), await PostgresStore.open(pg_url)
    try:
        later = utcnow() + timedelta(minutes=5)
        for n in range(20):
            await a.put_pending(
                token=f"t{n}", user_key=ALICE, kind="k", payload=str(n), expires_at=later
            )
        now = utcnow()
        taken = await asyncio.gather(
            *(
                s.take_pending(token=f"t{n}", user_key=ALICE, kind="k", now=now)
                for n in range(20)
                for s in (a, b)
            )
        )
        assert sorted(t for t in taken if t is not None) == sorted(str(n) for n in range(20))
    finally:
        await a.close()
        await b.close()
