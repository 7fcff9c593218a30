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
