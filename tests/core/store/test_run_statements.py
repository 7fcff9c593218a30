"""The contract of ``_run_statements`` (:class:`core.store.statements.StatementRules`), on
SQLite and PostgreSQL alike: the one hook the statement-only writes (a mode change, pending
actions, feedback, a channel's writes) run through. A new backend passes this file before
the tests of those writes can pass on it."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import cast

import pytest

from core.errors import StoreError
from core.store.seams import Store
from core.store.statements import StatementRules
from core.types import utcnow

ALICE = "cli:alice"
PUT = (
    "INSERT INTO pending_actions(token, user_key, kind, payload, expires_at)"
    " VALUES (?, ?, 'k', '{}', ?)"
)


async def test_statements_run_in_order_in_one_transaction_and_count_their_rows(
    store: Store,
) -> None:
    run = cast(StatementRules, store)._run_statements
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
    with pytest.raises((StoreError, sqlite3.Error)):
        await run([(PUT, ("t3", ALICE, later)), (PUT, ("t2", ALICE, later))], retry=True)
    assert await store.pending_owner(token="t3", kind="k", now=now) is None
    assert await run([]) == []
