"""The one map from a database URL to its backend (:mod:`core.store.database`): what it
accepts, the one clear error for what it does not, and the commands that go through it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bots.cli import app
from bots.terminal.history import terminal_folder
from core.errors import ConfigError
from core.runtime import open_store
from core.store.database import Database, backup, database, mask_url, read_schema
from tests.conftest import run_sync


def test_paths_and_urls_name_their_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    absolute = f"sqlite:///{tmp_path}/a.db"
    for value in ("a.db", " a.db\n", "sqlite:///a.db", absolute, f"sqlite:///{tmp_path}/./a.db"):
        assert database(value) == Database("sqlite", absolute), value
    assert database("~/m.db").path == tmp_path / "home" / "m.db"
    # a unicode file name is a file name
    assert database("mémoire-記憶.db").path == tmp_path / "mémoire-記憶.db"
    for url in ("postgresql://u@h/db", "postgres://u:pw@h:5432/db?sslmode=require"):
        db = database(url)
        assert (db.backend, db.url, db.label) == ("postgres", url, "PostgreSQL")
    assert database("POSTGRESQL://u@h/db").backend == "postgres"
    secret = database("postgresql://app:hunter2@db.example/x")
    assert "hunter2" not in secret.where and secret.where == "postgresql://app:***@db.example/x"
    assert mask_url("postgresql://h/x?password=hunter2") == "postgresql://h/x?password=***"
    # where the terminal keeps its files, from the same map
    assert terminal_folder(absolute) == tmp_path
    assert terminal_folder("postgresql://u@h/db") == tmp_path / "home" / ".selfmind"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "is empty"),
        ("   \t ", "is empty"),
        ("mysql://u@h/db", "unsupported scheme 'mysql'"),
        ("://nothing", "unsupported scheme ''"),
        ("http://example.com/x.db", "unsupported scheme 'http'"),
        ("x" * 5000 + "://h", "unsupported scheme 'xxxxxxxxxxxxxxxxxxxx...'"),
        ("postgresql://[::1/db", "not a PostgreSQL URL"),
        ("postgresql://u@h:99999/db", "not a PostgreSQL URL"),
        ("postgresql://u@h:port/db", "not a PostgreSQL URL"),
        ("postgresql://", "names no server or database"),
        ("sqlite://relative.db", "three slashes"),
        ("sqlite:///", "three slashes"),
        ("postgresql:/u@h/db", "postgresql: needs '://'"),
        ("sqlite:memory.db", "sqlite: needs '://'"),
        ("a.db\x00b", "control characters"),
        ("postgresql://u@h/db\nDROP", "control characters"),
        ("sqlite:///a\x1b[31m.db", "control characters"),
        ("ftp\u202e://h", "control characters"),
    ],
)
def test_a_bad_value_is_one_clear_error(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        database(value)
    message = str(raised.value)
    assert message.startswith("SELFMIND_DB") and says in message, message
    assert "\n" not in message and len(message) < 200
    with pytest.raises(ConfigError, match=r"^--from"):
        database(value, setting="--from")


def test_the_cli_refuses_a_bad_db_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SELFMIND_DB", raising=False)
    for bad in ("mysql://u@h/db", "postgresql://[::1/db", "sqlite://x.db"):
        result = CliRunner().invoke(app, ["--db", bad, "users"])
        assert result.exit_code == 1
        assert result.stderr.startswith("error: SELFMIND_DB") and result.stderr.count("\n") == 1
    copy = CliRunner().invoke(app, ["db", "copy", "--from", "x.db", "--to", "mysql://h/x"])
    assert copy.exit_code == 2 and "--to: unsupported scheme 'mysql'" in copy.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_open_migrate_backup_and_schema_go_through_the_map(db_url: str, tmp_path: Path) -> None:
    db = database(db_url)

    async def work() -> None:
        store = await open_store(db_url)
        await store.close()
        state = await read_schema(db)
        assert state is not None and not state.pending and not state.unknown
        if db.sqlite:
            assert await backup(db, tmp_path / "copy.db") > 0
            assert await read_schema(database(str(tmp_path / "copy.db"))) == state
            assert await read_schema(database(str(tmp_path / "none.db"))) is None
        else:
            with pytest.raises(ConfigError, match="pg_dump"):
                await backup(db, tmp_path / "copy.db")

    run_sync(work())
