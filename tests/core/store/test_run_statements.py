"""The contract of ``_run_statements`` (:class:`core.store.statements.StatementHook`), on
SQLite and PostgreSQL alike: the one hook the statement-only writes (a mode change, pending
actions, feedback, a channel's writes) run through. A new backend passes this file before
the tests of those writes can pass on it. Its failures are ``StoreError`` (the driver's error
is the cause): a constraint on both backends; a database locked by another process and a
full disk on SQLite, where a test can make them."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest

from core.errors import StoreError, storage_failed
from core.store.seams import Store
from core.store.sqlite.store import SQLiteStore
from core.store.statements import StatementHook
from core.types import utcnow
from tests.store_helpers import fill_disk, free_disk, locked_by_another_process

ALICE = "cli:alice"
PUT = (
    "INSERT INTO pending_actions(token, user_key, kind, payload, expires_at)"
    " VALUES (?, ?, 'k', '{}', ?)"
)


async def test_statements_run_in_order_in_one_transaction_and_count_their_rows(
    store: Store,
) -> None:
    run = cast(StatementHook, store)._run_statements
    now = utcnow()
    later = now + timedelta(hours=1)
    counts = await run(
        [
            (PUT, ("t1", ALICE, later)),
            (PUT, ("t2", ALICE, later)),
            ("DELETE FROM pending_actions WHERE token IN (?, ?)", ("t1", "no such token")),
            ("UPDATE pending_actions SET payload = '[]' WHERE user_key = ?", ("nobody",)),
        ]
    )
    assert counts == [1, 1, 1, 0]
    # A datetime parameter is stored as the backend stores a time: compared as one.
    assert await store.pending_owner(token="t1", kind="k", now=now) is None
    assert await store.pending_owner(token="t2", kind="k", now=now) == ALICE
    assert await store.pending_owner(token="t2", kind="k", now=later) is None
    # A failing statement rolls back the ones before it.
    with pytest.raises(StoreError) as caught:
        await run([(PUT, ("t3", ALICE, later)), (PUT, ("t2", ALICE, later))], retry=True)
    assert storage_failed(caught.value)
    assert await store.pending_owner(token="t3", kind="k", now=now) is None
    assert await run([]) == []


async def test_a_refused_row_is_a_store_error_that_quotes_none_of_its_values(store: Store) -> None:
    run = cast(StatementHook, store)._run_statements
    mode = "The user's sister Ana lives in Lisbon"  # memory text in a refused row
    with pytest.raises(StoreError, match=r"(?i)check") as caught:
        await run(
            [
                (
                    "INSERT INTO memory_modes(user_key, mode, updated_at) VALUES (?, ?, ?)",
                    (ALICE, mode, utcnow()),
                )
            ]
        )
    assert "Lisbon" not in str(caught.value)


async def test_a_database_locked_by_another_process_is_a_store_error_and_nothing_is_written(
    db_path: Path,
) -> None:
    store = await SQLiteStore.open(str(db_path))
    later = utcnow() + timedelta(hours=1)
    try:
        async with locked_by_another_process(store) as release:
            with pytest.raises(StoreError, match="locked") as caught:
                await store._run_statements([(PUT, ("t1", ALICE, later))])
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            with pytest.raises(StoreError, match="locked"):  # a seam's write through the hook
                await store.set_mode(user_key=ALICE, mode="paused")
            release()
        assert await store.get_mode(user_key=ALICE) == "on"
        assert await store.pending_owner(token="t1", kind="k", now=utcnow()) is None
        await store.set_mode(user_key=ALICE, mode="paused")
        assert await store.get_mode(user_key=ALICE) == "paused"
    finally:
        await store.close()


async def test_a_full_disk_is_a_store_error_and_nothing_is_written(
    sqlite_store: SQLiteStore,
) -> None:
    await fill_disk(sqlite_store)
    later = utcnow() + timedelta(hours=1)
    big = "x" * 50_000  # needs new pages
    with pytest.raises(StoreError, match="full") as caught:
        await sqlite_store.put_pending(
            token="t1", user_key=ALICE, kind="k", payload=big, expires_at=later
        )
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert storage_failed(caught.value)
    assert await sqlite_store.pending_owner(token="t1", kind="k", now=utcnow()) is None
    await free_disk(sqlite_store)
    await sqlite_store.put_pending(
        token="t1", user_key=ALICE, kind="k", payload=big, expires_at=later
    )
    assert await sqlite_store.pending_owner(token="t1", kind="k", now=utcnow()) == ALICE
