"""The migration that gives every stored memory its place (SQLite ``m017_places``,
PostgreSQL ``m014_places``), on both backends: from the turn it was learned in; where that
turn is gone, or it was learned in a DM, the owner's DM (the narrowest); recall filters by
the place rule afterwards (SQLite: the FTS5 marker terms are rewritten)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.rules.dedupe import Deduper
from core.rules.places import reach_of
from core.rules.text import index_terms, normalize
from core.runtime import open_store
from core.store.postgres import base as pg_base
from core.store.postgres.base import MIGRATIONS as PG_MIGRATIONS
from core.store.sqlite import base as sqlite_base
from core.store.sqlite.base import MIGRATIONS as SQLITE_MIGRATIONS
from core.types import NewMemory, Place
from tests.conftest import fresh_pg_database, run_sync
from tests.core.rules.test_text_hygiene import write_raw

ALICE, BOB = "slack:T1:UALICE", "discord:42"
AT = "2026-11-01T12:00:00+00:00"


@pytest.fixture
def url(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'memory.db'}"
        return
    with fresh_pg_database(migrated=False) as pg:
        yield pg


def old_store(url: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store as the version before places wrote it (every migration but the last)."""
    module = sqlite_base if backend == "sqlite" else pg_base
    migrations = SQLITE_MIGRATIONS if backend == "sqlite" else PG_MIGRATIONS
    name = "m017_places" if backend == "sqlite" else "m014_places"
    index = [m[1] for m in migrations].index(name)  # later ones (team memory's) come after

    async def build() -> None:
        store = await open_store(url)
        await store.close()

    with monkeypatch.context() as m:
        m.setattr(module, "MIGRATIONS", migrations[:index])
        run_sync(build())


MEMORIES = [
    # (user, uid, text, origin, conversation key, a turn of the owner kept in it)
    (ALICE, 1, "The user drinks green tea.", "private", "slack:T1:D1", True),
    (
        ALICE,
        1,
        "The user is in recovery from alcohol addiction.",
        "shared",
        "slack:T1:G1:1.0",
        True,
    ),
    (ALICE, 1, "The user leads the billing team.", "shared", "slack:T1:C1:2.0", True),
    (ALICE, 1, "The user plays the cello.", "shared", "slack:T1:C5:3.0", False),
    (ALICE, 1, "The user likes Go.", "shared", None, False),
    (BOB, 2, "The user runs a small server for friends.", "shared", "discord:100:555", True),
]


async def test_every_memory_gets_its_place(
    backend: str, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_store(url, backend, monkeypatch)
    statements: list[tuple[str, tuple[object, ...]]] = [
        ("INSERT INTO users(uid, user_key, created_at) VALUES (?, ?, ?)", (1, ALICE, AT)),
        ("INSERT INTO users(uid, user_key, created_at) VALUES (?, ?, ?)", (2, BOB, AT)),
    ]
    for user, uid, text, origin, key, turn in MEMORIES:
        terms = index_terms(uid, text)
        statements.append(
            (
                "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source,"
                " origin, conversation_key, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, 'fact', 'general', 'reflection', ?, ?, ?, ?)",
                (uid, text, normalize(text), " ".join(terms), len(terms), origin, key, AT, AT),
            )
        )
        if turn:
            statements.append(
                (
                    "INSERT INTO turns(conversation_key, user_key, role, text, origin, sent_at,"
                    " created_at) VALUES (?, ?, 'user', 'hello', ?, ?, ?)",
                    (key, user, origin, AT, AT),
                )
            )
    if backend == "postgres":  # timestamps are timestamptz there
        from datetime import datetime

        at = datetime.fromisoformat(AT)
        statements = [(sql, tuple(at if v == AT else v for v in args)) for sql, args in statements]
    await write_raw(url, statements)

    store = await open_store(url, migrate=True)
    try:
        places = {m.text: m.place for m in await store.list_memories(user_key=ALICE, limit=50)}
        dm = None  # NULL: the owner's DM
        assert places == {
            "The user drinks green tea.": dm,
            "The user is in recovery from alcohol addiction.": Place(
                "slack", "group_dm", "T1", "G1"
            ),
            "The user leads the billing team.": Place("slack", "private_channel", "T1", "C1"),
            "The user plays the cello.": dm,  # its turns are gone: the narrowest
            "The user likes Go.": dm,
        }
        (bobs,) = await store.list_memories(user_key=BOB)
        assert bobs.place == Place("discord", "private_channel", "100", "555")

        async def found(reach: list[str] | None, user: str = ALICE) -> set[str]:
            hits = await store.search(user_key=user, query="user", k=20, reach=reach)
            return {h.memory.text for h in hits}

        everything = {m[2] for m in MEMORIES if m[0] == ALICE}
        assert await found(None) == everything
        assert await found([reach_of(Place("slack", "public_channel", "T1", "C9"))]) == set()
        assert await found([reach_of(Place("slack", "group_dm", "T1", "G1"))]) == {
            "The user is in recovery from alcohol addiction."
        }
        assert await found(["dm"]) == everything - {
            "The user is in recovery from alcohol addiction.",
            "The user leads the billing team.",
        }
        # A new memory after the migration is indexed under its own reach.
        public = Place("slack", "public_channel", "T1", "C9")
        await store.add(
            user_key=ALICE,
            memory=NewMemory(text="The user ships on Fridays.", place=public),
            dedupe=Deduper(),
        )
        assert await found([reach_of(public)]) == {"The user ships on Fridays."}
    finally:
        await store.close()
    if backend == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            for shard in range(32):
                fts = f"memories_fts_{shard}"
                conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')")
        finally:
            conn.close()
