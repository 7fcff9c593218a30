"""The PostgreSQL store as several replicas see it: two stores (two pools) on one database
stand for two bot processes. The store contract itself runs on both backends in
test_store.py / test_loop.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from core.errors import StoreError
from core.memory.service import MemoryService
from core.rules.bm25 import rescore
from core.rules.dedupe import Deduper
from core.rules.text import index_terms, query_terms
from core.runtime import open_store
from core.store.postgres.base import LOCK_REPLICA
from core.store.postgres.store import PostgresStore
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory
from tests.conftest import locomo_or_skip
from tests.store_helpers import pending_turn

ALICE, BOB = "slack:T1:UALICE", "slack:T1:UBOB"


@pytest.fixture
async def replicas(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    a = await PostgresStore.open(pg_url, pool_size=4)
    b = await PostgresStore.open(pg_url, pool_size=4)
    yield a, b
    await a.close()
    await b.close()


async def test_same_memory_from_two_replicas_is_stored_once(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = (MemoryService(s) for s in replicas)
    exact = await asyncio.gather(
        *(s.remember(user_key=ALICE, text="The user likes jazz.") for s in (a, b) * 25)
    )
    assert sum(r.status == "added" for r in exact) == 1
    assert len({r.id for r in exact}) == 1
    # Near-twins (other case and punctuation; a stop word added) too: dedupe sees what the
    # other replica just stored because one user's writes are serialised.
    near = await asyncio.gather(
        a.remember(user_key=BOB, text="The user prefers tabs over spaces."),
        b.remember(user_key=BOB, text="the user prefers TABS over spaces!"),
        a.remember(user_key=BOB, text="The user prefers tabs over the spaces."),
    )
    assert sum(r.status == "added" for r in near) == 1
    assert await a.count(user_key=ALICE) == 1 and await b.count(user_key=BOB) == 1


async def test_unique_index_catches_a_concurrent_identical_insert(
    replicas: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    a, b = replicas
    await MemoryService(a).remember(user_key=ALICE, text="The user owns a cat.")
    uid = await a._uid(ALICE)
    # Another writer's insert, not yet committed, that bypasses the user's row lock ...
    other = await asyncpg.connect(pg_url)
    try:
        tx = other.transaction()
        await tx.start()
        raced = await other.fetchval(
            "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source,"
            " origin, created_at, updated_at) VALUES ($1, 'The user owns a dog.',"
            " 'the user owns a dog', 'x', 1, 'fact', 'general', 'remember', 'private',"
            " now(), now()) RETURNING id",
            uid,
        )
        # ... so this write waits on the unique index, then reports a duplicate of it.
        pending = asyncio.create_task(
            MemoryService(b).remember(user_key=ALICE, text="The user owns a dog.")
        )
        await asyncio.sleep(0.3)
        assert not pending.done()
        await tx.commit()
        result = await asyncio.wait_for(pending, 10)
    finally:
        await other.close()
    assert (result.status, result.id) == ("duplicate", raced)


async def test_claim_event_raced_from_two_pools(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    for n in range(20):
        keys = [f"event:Ev{n}", f"msg:C1:{n}.000"]
        claims = await asyncio.gather(
            *(s.claim_event(keys=keys if i % 2 else keys[::-1]) for i, s in enumerate((a, b) * 4))
        )
        assert sum(claims) == 1, n
    # Either key of an event claimed before is enough to refuse it, and nothing sticks.
    assert await a.claim_event(keys=["event:new", "msg:C1:3.000"]) is False
    assert await b.claim_event(keys=["event:new"]) is True


async def test_an_event_claimed_by_a_live_replica_is_its_own(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    keys = ["event:Ev1", "msg:D1:1.000"]
    assert await a.claim_event(keys=keys)
    assert not await b.claim_event(keys=keys[::-1])
    assert await b.event_claimed_elsewhere(keys=keys[1:])  # a is answering it: b skips it
    assert not await a.event_claimed_elsewhere(keys=keys)  # a's own claim
    a._session.terminate()  # a dies: its unanswered event may be taken over
    for _ in range(100):
        if not await b.event_claimed_elsewhere(keys=keys):
            break
        await asyncio.sleep(0.05)
    assert not await b.event_claimed_elsewhere(keys=keys)
    a._pool.terminate()
    await a.close()


async def test_reflection_lock_excludes_across_replicas(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    order: list[str] = []

    async def hold(store: PostgresStore, name: str, user: str, seconds: float) -> None:
        async with store.reflection_lock(user_key=user):
            order.append(f"{name} in")
            await asyncio.sleep(seconds)
            order.append(f"{name} out")

    first = asyncio.create_task(hold(a, "a", ALICE, 0.5))
    await asyncio.sleep(0.1)
    second = asyncio.create_task(hold(b, "b", ALICE, 0.0))
    other_user = asyncio.create_task(hold(b, "bob", BOB, 0.0))
    await asyncio.wait_for(asyncio.gather(first, second, other_user), 10)
    assert order.index("b in") > order.index("a out")
    assert order.index("bob out") < order.index("a out")  # another user never waits


async def test_a_dead_replicas_lock_and_reflections_pass_to_a_live_one(
    replicas: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    a, b = replicas
    turn_id = await pending_turn(a, ALICE)
    assert await b.turns_to_reflect() == []  # a is alive: its reflection stays its own
    entered = asyncio.Event()

    async def reflect_on_a() -> None:
        async with a.reflection_lock(user_key=ALICE):
            entered.set()
            await asyncio.sleep(60)

    hung = asyncio.create_task(reflect_on_a())
    await entered.wait()
    # The process behind `a` dies: the server drops its connections and their locks.
    a._session.terminate()
    a._pool.terminate()
    for _ in range(100):
        taken = await b.turns_to_reflect()
        if taken:
            break
        await asyncio.sleep(0.05)
    assert [t.id for t in taken] == [turn_id]
    async with asyncio.timeout(5), b.reflection_lock(user_key=ALICE):
        pass
    hung.cancel()
    await asyncio.gather(hung, return_exceptions=True)
    # Taken over exactly once: a third replica finds nothing while b is alive.
    c = await PostgresStore.open(pg_url, pool_size=2)
    try:
        assert await c.turns_to_reflect() == []
        owners = await c._fetch(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::bigint::oid",
            LOCK_REPLICA,
        )
        assert {int(r[0]) for r in owners} >= {b.replica_id, c.replica_id}
    finally:
        await c.close()
    await a.close()  # a second close of a dead replica is quiet


async def test_close_hands_unfinished_reflections_back(pg_url: str) -> None:
    a = await PostgresStore.open(pg_url, pool_size=2)
    turn_id = await pending_turn(a, ALICE)
    await a.close()
    b = await PostgresStore.open(pg_url, pool_size=2)
    try:
        assert [t.id for t in await b.turns_to_reflect()] == [turn_id]
    finally:
        await b.close()


async def test_errors_never_show_the_password() -> None:
    with pytest.raises(StoreError) as err:
        await open_store("postgresql://selfmind:hunter2@127.0.0.1:1/nowhere")
    assert "hunter2" not in str(err.value) and "***" in str(err.value)


@pytest.mark.parametrize("extra_words", [0, 10, 200])
async def test_short_and_long_queries_rank_as_in_sqlite(
    pg_url: str, tmp_path: Path, extra_words: int
) -> None:
    texts = [
        "The user prefers tabs over spaces in Python and Go.",
        "The user writes C++ and Rust at work, and Python at home.",
        "The user lives in Berlin and works in Potsdam.",
        "The user prefers dark mode in every editor, even vim.",
        "The user's team meets on Tuesdays in Tokyo.",
    ]
    query = "which editor and language does the user prefer at work " + " ".join(
        f"filler{i}" for i in range(extra_words)
    )
    sqlite = await SQLiteStore.open(str(tmp_path / "m.db"))
    pg = await PostgresStore.open(pg_url, pool_size=2)
    try:
        found = []
        for store in (sqlite, pg):
            for text in texts:
                await MemoryService(store).remember(user_key=ALICE, text=text)
            hits = await store.search(user_key=ALICE, query=query, k=6)
            found.append([(s.memory.id, s.score) for s in hits])
        assert found[0] == found[1] and len(found[0]) == 4
    finally:
        await sqlite.close()
        await pg.close()


async def test_recall_is_per_user_bm25_and_scores_match_sqlite(pg_url: str, tmp_path: Path) -> None:
    """On one LoCoMo conversation: PostgreSQL's top 6 is exact per-user BM25 (every memory
    scored) for nearly every question, and a memory both backends return has the same score
    to the last bit. (SQLite's FTS5 pool is length-blind, so it misses more; see the
    core.store.postgres.store docstring.)"""
    from bench.locomo import load_all

    convs = load_all(locomo_or_skip(), ["conv-26"])
    observations = [NewMemory(text=o.text, source="import") for o in convs[0].all_observations()]
    sqlite = await SQLiteStore.open(str(tmp_path / "m.db"))
    pg = await PostgresStore.open(pg_url, pool_size=2)
    try:
        for store in (sqlite, pg):
            await store.add_many(user_key=ALICE, memories=observations, dedupe=Deduper())
        uid = await pg._uid(ALICE)
        assert uid is not None
        docs = [(m.id, " ".join(index_terms(uid, m.text))) for m in await pg.export(user_key=ALICE)]
        rows = [(i, terms, len(terms.split())) for i, terms in docs]
        total_len = sum(r[2] for r in rows)
        exact_hits = 0
        for q in convs[0].questions:
            terms = query_terms(uid, q.text)
            df = {t: sum(t in d.split() for _, d in docs) for t in terms}
            exact = [i for _, i in rescore(rows, df, n_docs=len(rows), total_len=total_len)[:6]]
            post = await pg.search(user_key=ALICE, query=q.text, k=6)
            exact_hits += [s.memory.id for s in post] == exact
            lite = {
                s.memory.text: s.score
                for s in await sqlite.search(user_key=ALICE, query=q.text, k=6)
            }
            for s in post:
                if s.memory.text in lite:
                    assert s.score == lite[s.memory.text]
        assert exact_hits / len(convs[0].questions) >= 0.95, exact_hits
    finally:
        await sqlite.close()
        await pg.close()


async def test_a_transaction_the_server_aborts_to_break_a_deadlock_runs_again(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    # Two replicas lock two users' rows in opposite orders: the server aborts one to break
    # the cycle (here the retrying one, which checks for deadlocks first), and it runs again.
    a, b = replicas
    for user in (ALICE, BOB):
        await a.add(user_key=user, memory=NewMemory(text="The user owns a cat."), dedupe=Deduper())
    lock = "SELECT 1 FROM users WHERE user_key = $1 FOR UPDATE"
    a_locked, b_locked = asyncio.Event(), asyncio.Event()
    runs = 0

    async def other() -> None:
        async with a._tx() as conn:
            await conn.execute(lock, ALICE)
            a_locked.set()
            await b_locked.wait()
            await conn.execute(lock, BOB)  # waits for the retrying one

    async def work(conn: asyncpg.Connection) -> int:
        nonlocal runs
        runs += 1
        await conn.execute("SET LOCAL deadlock_timeout = '10ms'")
        await conn.execute(lock, BOB)
        if runs == 1:
            b_locked.set()
            await a_locked.wait()
            await asyncio.sleep(0.1)  # the other is waiting for BOB's row by now
            await conn.execute(lock, ALICE)  # the cycle: aborted here
        return runs

    done = await asyncio.wait_for(asyncio.gather(other(), b._tx_retrying(work)), 10)
    assert done[1] == 2


async def test_a_deadlock_every_time_is_one_store_error(pg_url: str) -> None:
    store = await PostgresStore.open(pg_url, pool_size=2)
    runs = 0

    async def work(conn: asyncpg.Connection) -> None:
        nonlocal runs
        runs += 1
        raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")

    try:
        with pytest.raises(StoreError, match="DeadlockDetectedError"):
            await store._tx_retrying(work)
    finally:
        await store.close()
    assert runs == 3
