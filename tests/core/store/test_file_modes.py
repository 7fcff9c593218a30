"""Private files: the store's folder 0700 and its database files 0600 whatever the umask;
one warning for an existing store other accounts can read. SQLite only (PostgreSQL keeps
no files of ours)."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import StoreError
from core.store.sqlite.store import SQLiteStore
from core.types import NewTurn, utcnow

ALICE = "cli:alice"


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def side_files(db: Path) -> list[Path]:
    return [Path(f"{db}{s}") for s in ("", "-wal", "-shm") if Path(f"{db}{s}").exists()]


def mode_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "by other accounts" in r.getMessage()
    ]


@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize("umask", [0o022, 0o000, 0o077])
async def test_new_store_is_private_whatever_the_umask(
    tmp_path: Path, umask: int, caplog: pytest.LogCaptureFixture
) -> None:
    os.umask(umask)
    db = tmp_path / "home" / ".selfmind" / "memory.db"
    store = await SQLiteStore.open(str(db))
    try:
        # A write makes SQLite create the WAL and the shared-memory index.
        await store.add_turn(
            turn=NewTurn(
                conversation_key="c",
                user_key=ALICE,
                role="user",
                text="hi",
                origin="private",
                sent_at=utcnow(),
            )
        )
        files = side_files(db)
        assert [f.name for f in files] == ["memory.db", "memory.db-wal", "memory.db-shm"]
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
        assert mode(db.parent) == 0o700
    finally:
        await store.close()
    assert mode_warnings(caplog) == []


@pytest.mark.usefixtures("umask_022")
async def test_wal_created_later_takes_the_main_files_mode(tmp_path: Path) -> None:
    """SQLite itself gives a new -wal/-shm the database file's mode (checked, not assumed):
    the files deleted by a clean close come back 0600 at the next open."""
    db = tmp_path / "memory.db"
    store = await SQLiteStore.open(str(db))
    await store.close()
    for f in side_files(db)[1:]:
        f.unlink()
    conn = sqlite3.connect(db)  # plain SQLite, not our open: no chmod of ours
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS probe(x)")
        conn.execute("INSERT INTO probe VALUES (1)")
        conn.commit()
        assert {f.name: mode(f) for f in side_files(db)} == {
            "memory.db": 0o600,
            "memory.db-wal": 0o600,
            "memory.db-shm": 0o600,
        }
    finally:
        conn.close()


@pytest.mark.usefixtures("umask_022")
async def test_existing_folder_is_left_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    store = await SQLiteStore.open(str(folder / "memory.db"))
    await store.close()
    assert mode(folder) == 0o755
    assert mode(folder / "memory.db") == 0o600


@pytest.mark.usefixtures("umask_022")
async def test_readable_store_warns_once_and_still_opens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "memory.db"
    # A store made by an earlier version: 0644 under umask 022.
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    os.chmod(db, 0o644)
    assert mode(db) == 0o644
    caplog.set_level(logging.WARNING, logger="core.store.sqlite.base")
    store = await SQLiteStore.open(str(db))
    try:
        assert await store.count(user_key=ALICE) == 0
    finally:
        await store.close()
    warnings = mode_warnings(caplog)
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    assert str(db) in line and f"chmod 600 {db}" in line and "644" in line
    assert "\n" not in line
    assert mode(db) == 0o644  # warned, not changed behind the owner's back


async def test_unusable_folder_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot create database"):
        await SQLiteStore.open(str(blocker / "memory.db"))
