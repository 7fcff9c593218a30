"""The test fixtures' shortcuts hold what they stand in for: a new SQLite store copied from the
migrated template (tests/conftest.py) has the schema, migrations and file mode of one that ran
every migration; a test that patches the migration list gets them run for real."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from core.store.sqlite import base as sqlite_base
from core.store.sqlite.base import MIGRATIONS
from core.store.sqlite.store import SQLiteStore
from tests.conftest import _ORIGINAL_OPEN


def schema(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        return [(t, n, s or "") for t, n, s in rows]


async def test_a_new_store_is_the_migrated_template(tmp_path: Path) -> None:
    copied = await SQLiteStore.open(str(tmp_path / "copied.db"))
    migrated = await _ORIGINAL_OPEN(SQLiteStore, str(tmp_path / "migrated.db"))
    try:
        assert copied.migrated == () and len(migrated.migrated) == len(MIGRATIONS)
        assert await copied.applied_migrations() == await migrated.applied_migrations()
    finally:
        await copied.close()
        await migrated.close()
    assert schema(tmp_path / "copied.db") == schema(tmp_path / "migrated.db")
    modes = {stat.S_IMODE((tmp_path / f"{n}.db").stat().st_mode) for n in ("copied", "migrated")}
    assert modes == {0o600}


@pytest.mark.real_migrations
async def test_real_migrations_run_every_migration(tmp_path: Path) -> None:
    store = await SQLiteStore.open(str(tmp_path / "new.db"))
    await store.close()
    assert store.migrated == tuple(name for _, name, _ in MIGRATIONS)


async def test_a_patched_migration_list_runs_for_real(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_base, "MIGRATIONS", MIGRATIONS[:3])
    store = await SQLiteStore.open(str(tmp_path / "old.db"))
    await store.close()
    assert store.migrated == tuple(name for _, name, _ in MIGRATIONS[:3])


async def test_the_postgres_database_is_emptied_for_each_test(pg_url: str) -> None:
    """``pg_url`` empties every table a store writes and restarts its ids, as a new database
    would, and keeps the migrations record (``DELETE`` in foreign-key order, not
    ``TRUNCATE``)."""
    import asyncpg

    from core.memory.service import MemoryService
    from core.runtime import open_store
    from core.store.postgres.admin import TABLES
    from tests.conftest import _truncate

    async def counts() -> dict[str, int]:
        conn = await asyncpg.connect(pg_url)
        try:
            return {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in tables}
        finally:
            await conn.close()

    tables = [t.name for t in TABLES] + ["schema_migrations"]
    store = await open_store(pg_url)
    try:
        service = MemoryService(store)
        first = await service.remember(user_key="cli:alice", text="The user likes tea.")
        await service.remember(user_key="cli:bob", text="The user likes coffee.")
        written = await counts()
        assert written["users"] == written["memories"] == 2, written
        await _truncate(pg_url)
        emptied = await counts()
        assert emptied.pop("schema_migrations") == written["schema_migrations"] > 0
        assert set(emptied.values()) == {0}, emptied
        again = await service.remember(user_key="cli:bob", text="The user likes coffee.")
        assert again.id == first.id == 1
    finally:
        await store.close()


def test_every_worker_group_names_files_that_exist_and_the_scheduler_keeps_each_together(
    request: pytest.FixtureRequest,
) -> None:
    """A file renamed or moved would fall out of its group and run beside the others."""
    from tests.conftest import REPO_ROOT, WORKER_GROUPS, pytest_xdist_make_scheduler

    for paths in WORKER_GROUPS.values():
        for path in paths:
            assert (REPO_ROOT / path).exists(), path

    class Dist:
        def __init__(self, dist: str) -> None:
            self.dist = dist

        def getvalue(self, name: str) -> object:
            return {"dist": self.dist, "tx": ["2*popen"]}[name]

    assert pytest_xdist_make_scheduler(Dist("load"), None) is None  # type: ignore[arg-type]
    scheduler = pytest_xdist_make_scheduler(Dist("loadgroup"), None)  # type: ignore[arg-type]
    scope = scheduler._split_scope  # type: ignore[attr-defined]
    assert scope("tests/bots/terminal/test_terminal.py::test_a") == "terminals"
    assert scope("tests/bots/terminal/test_crash_recovery.py::test_a") == "terminal crashes"
    assert scope("tests/bots/test_eval_cli.py::test_b[x]") == "terminals"
    assert scope("tests/core/store/test_durability.py::test_c") == "slack connections"
    assert scope("tests/bots/slack_bot/test_slack_process.py::test_c") == "slack crashes"
    assert scope("tests/bots/discord_bot/test_discord_recovery.py::test_f") == "discord processes"
    assert scope("tests/core/memory/test_semantic.py::test_d") == "embedding model"
    alone = "tests/core/store/test_store.py::test_e[sqlite]"
    assert scope(alone) == alone

    # Handed out: the groups (longest first, as listed), then the long tests, then the rest.
    long_test = "tests/bench/test_replay_slice.py::test_replay"
    ids = [
        alone,
        "tests/core/memory/test_semantic.py::test_d",
        long_test,
        "tests/bots/terminal/test_terminal.py::test_a",
        "tests/bots/terminal/test_crash_recovery.py::test_a",
        "tests/core/store/test_durability.py::test_c",
    ]

    class Node:
        def send_runtest_some(self, indexes: list[int]) -> None:
            pass

    node = Node()
    scheduler.registered_collections = {node: ids}  # type: ignore[attr-defined]
    for nodeid in ids:
        scheduler.workqueue.setdefault(scope(nodeid), {})[nodeid] = False  # type: ignore[attr-defined]
    for _ in ids:
        scheduler._assign_work_unit(node)  # type: ignore[attr-defined]
    assert list(scheduler.assigned_work[node]) == [  # type: ignore[attr-defined]
        "terminal crashes",
        "terminals",
        "slack connections",
        "embedding model",
        long_test,
        alone,
    ]
