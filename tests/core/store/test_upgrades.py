"""Upgrades that ask first (:mod:`core.store.schema`), on both backends: a store that is
behind is left untouched by every command but ``db migrate`` (and the bots' start), which
backs a SQLite file up first and names each migration it applies; a store a newer SelfMind
wrote is refused by every command in one line, changing nothing."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bots.cli import app
from core.errors import NewerSchemaError, SchemaBehindError
from core.runtime import open_runtime, open_store
from core.settings import load_settings
from core.store.postgres import base as pg_base
from core.store.postgres.base import MIGRATIONS as PG_MIGRATIONS
from core.store.schema import SchemaState, check_schema
from core.store.sqlite import base as sqlite_base
from core.store.sqlite.base import MIGRATIONS as SQLITE_MIGRATIONS
from tests.conftest import fresh_pg_database, run_sync

runner = CliRunner()
BEHIND = 2
"""The old store misses this version's last two migrations (whatever the list holds)."""
FUTURE = (999, "m999_from_a_newer_selfmind", "0.9.0")


def known(backend: str) -> list[tuple[int, str]]:
    migrations = SQLITE_MIGRATIONS if backend == "sqlite" else PG_MIGRATIONS
    return [(number, name) for number, name, _ in migrations]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Commands run from an empty folder, with no settings file anywhere to read."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("ANTHROPIC_API_KEY", "SELFMIND_DB", "SELFMIND_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture
def url(backend: str, isolated: Path) -> Iterator[str]:
    """An empty store of the backend (a SQLite file's URL, or a new PostgreSQL database)."""
    if backend == "sqlite":
        yield f"sqlite:///{isolated / 'memory.db'}"
        return
    with fresh_pg_database(migrated=False) as pg:
        yield pg


def make_store(url: str, backend: str, monkeypatch: pytest.MonkeyPatch, *, upto: int) -> None:
    """Create the store as a SelfMind that knows only the first ``upto`` migrations would,
    with one user and a memory in it."""
    module = sqlite_base if backend == "sqlite" else pg_base
    migrations = SQLITE_MIGRATIONS if backend == "sqlite" else PG_MIGRATIONS

    async def build() -> None:
        store = await open_store(url)
        await store.close()

    with monkeypatch.context() as m:
        m.setattr(module, "MIGRATIONS", migrations[:upto])
        run_sync(build())
    sql = (
        "INSERT INTO users(user_key, created_at) VALUES ('cli:alice', '2026-12-01T00:00:00+00:00')"
    )
    run_sql(url, [sql])


def run_sql(url: str, statements: list[str]) -> None:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for sql in statements:
                conn.execute(sql)
        conn.close()
        return

    async def pg() -> None:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            for sql in statements:
                await conn.execute(sql)
        finally:
            await conn.close()

    run_sync(pg())


def snapshot(url: str) -> object:
    """What "changed nothing" compares: a SQLite file's bytes, or a PostgreSQL database's
    migrations, columns and users."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(
            p.name for p in path.parent.glob("memory*")
        )

    async def pg() -> object:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            return (
                [
                    tuple(r)
                    for r in await conn.fetch(
                        "SELECT number, name FROM schema_migrations ORDER BY 1"
                    )
                ],
                [
                    tuple(r)
                    for r in await conn.fetch(
                        "SELECT table_name, column_name FROM information_schema.columns"
                        " WHERE table_schema = 'public' ORDER BY 1, 2"
                    )
                ],
                [tuple(r) for r in await conn.fetch("SELECT uid, user_key FROM users ORDER BY 1")],
            )
        finally:
            await conn.close()

    return run_sync(pg())  # fmt: skip


def cli(*args: str, stdin: str = "") -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def commands(url: str, tmp_path: Path) -> list[list[str]]:
    """Every command that opens a store (the bots through their runtime, below)."""
    dump = tmp_path / "dump.jsonl"
    dump.write_text('{"text": "The user likes tea."}\n')
    db = ["--db", url]
    found = [
        [*db, "users"],
        [*db, "usage"],
        [*db, "feedback"],
        [*db, "memories", "list", "--user", "alice"],
        [*db, "memories", "search", "tea", "--user", "alice"],
        [*db, "memories", "stats"],
        [*db, "memories", "history", "--user", "alice"],
        [*db, "memories", "export", "--user", "alice"],
        [*db, "memories", "remember", "--user", "alice", "The user likes tea."],
        [*db, "memories", "import", str(dump), "--user", "alice"],
        [*db, "memories", "forget", "--user", "alice", "1"],
        [*db, "memories", "undo", "--user", "alice", "c-1"],
        [*db, "chat", "--user", "alice"],
    ]
    if url.startswith("sqlite:///"):
        found.append(["db", "copy", "--from", url, "--to", "postgresql://x@127.0.0.1:9/x"])
    return found


def test_the_rule_for_any_list_of_migrations() -> None:
    """Gaps and out-of-order landings: only numbers count."""
    have = [(1, "m001"), (2, "m002"), (4, "m004")]
    state = SchemaState.of(have, [(1, "m001"), (2, "m002"), (3, "m003"), (4, "m004")])
    assert state.pending == ((3, "m003"),) and not state.unknown and not state.fresh
    with pytest.raises(SchemaBehindError, match=r"needs `selfmind db migrate` \(1 migrations"):
        check_schema(state, where="database X", apply=False)
    check_schema(state, where="database X", apply=True)
    check_schema(SchemaState.of([], [(1, "m001")]), where="database X", apply=False)  # fresh
    newer = SchemaState.of([(1, "m001"), (7, "m007")], [(1, "m001"), (2, "m002")])
    with pytest.raises(NewerSchemaError, match=r"newer SelfMind: needs a SelfMind newer than"):
        check_schema(newer, where="database X", apply=True)
    # the store says which version knows its migrations: the newest of those it needs
    recorded = SchemaState.of(
        [(1, "m001"), (7, "m007"), (8, "m008")],
        [(1, "m001")],
        {1: "0.1.0", 7: "0.10.0", 8: "0.9.1"},
    )
    assert recorded.needs == "0.10.0"
    with pytest.raises(NewerSchemaError, match=r"needs SelfMind >= 0\.10\.0 \(the store has"):
        check_schema(recorded, where="database X", apply=False)


def test_a_store_behind_is_left_as_it_is_until_db_migrate(
    backend: str, url: str, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = known(backend)
    make_store(url, backend, monkeypatch, upto=len(names) - BEHIND)
    before = snapshot(url)
    for args in commands(url, isolated):
        code, _, err = cli(*args, stdin="hello\n")
        where = f"selfmind {' '.join(args)}: {err!r}"
        assert code == 1, where
        assert err.count("\n") == 1 and "needs `selfmind db migrate`" in err, where
        assert all(name in err for _, name in names[-BEHIND:]), where
        assert snapshot(url) == before, where

    code, out, err = cli("--db", url, "db", "migrate")
    assert code == 0, err
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("applied ")] == [
        f"applied {name}" for _, name in names[-BEHIND:]
    ]
    assert lines[-1] == f"schema up to date: {len(names)} migrations, latest {names[-1][1]}"
    if backend == "sqlite":
        assert lines[0].startswith("backed up the database to ")
        backup = Path(lines[0].removeprefix("backed up the database to "))
        assert backup.parent == isolated and backup.name.startswith("memory-before-migrate-")
        assert backup.stat().st_mode & 0o777 == 0o600
        with sqlite3.connect(backup) as old:  # the backup is the store as it was
            rows = old.execute("SELECT number FROM schema_migrations").fetchall()
        old.close()
        assert len(rows) == len(names) - BEHIND
    code, out, err = cli("--db", url, "users")
    assert code == 0 and "cli:alice" in out, err
    code, out, _ = cli("--db", url, "db", "migrate")
    assert out.splitlines() == [lines[-1]]  # nothing to apply: no second backup


@pytest.mark.sqlite_only
def test_db_migrate_no_backup(
    backend: str, url: str, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = known(backend)
    make_store(url, backend, monkeypatch, upto=len(names) - 1)
    code, out, err = cli("--db", url, "db", "migrate", "--no-backup")
    assert code == 0, err
    assert out.splitlines()[0] == f"applied {names[-1][1]}"
    assert not list(isolated.glob("*before-migrate*"))
    code, _, err = cli("--db", url, "db", "migrate", "--no-backup", "--backup", "x.db")
    assert code == 2 and "exclude each other" in err


def test_the_bots_start_migrates(backend: str, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    names = known(backend)
    make_store(url, backend, monkeypatch, upto=len(names) - BEHIND)

    async def start() -> tuple[str, ...]:
        settings = load_settings()
        async with open_runtime(settings, db_url=url, migrate=True) as rt:
            return rt.store.migrated

    assert run_sync(start()) == tuple(name for _, name in names[-BEHIND:])


def test_a_store_from_a_newer_selfmind_is_refused_by_every_command(
    backend: str, url: str, isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = known(backend)
    make_store(url, backend, monkeypatch, upto=len(names))
    number, name, version = FUTURE
    run_sql(
        url,
        [
            "INSERT INTO schema_migrations(number, name, applied_at, selfmind_version)"
            f" VALUES ({number}, '{name}', '2027-01-01', '{version}')"
        ],
    )
    before = snapshot(url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")  # cleanup gets as far as the store
    runs = [
        *commands(url, isolated),
        ["--db", url, "db", "migrate"],
        ["--db", url, "memories", "cleanup", "--user", "alice", "--dry-run"],
    ]
    for args in runs:
        code, _, err = cli(*args, stdin="hello\n")
        where = f"selfmind {' '.join(args)}: {err!r}"
        assert code == 1, where
        assert err.count("\n") == 1 and "newer" in err, where
        assert f"needs SelfMind >= {version}" in err, where  # what to install
        assert f"schema {number}, {name}" in err, where  # the store's schema
        assert f"schema {names[-1][0]}, {names[-1][1]}" in err, where  # this one's
        assert snapshot(url) == before, where

    async def start() -> None:
        async with open_runtime(load_settings(), db_url=url, migrate=True):
            pass

    with pytest.raises(NewerSchemaError, match="newer"):
        run_sync(start())
    assert snapshot(url) == before
