"""Migrations that change stored memories say so (:mod:`core.store.effects`), on both
backends: ``selfmind db migrate``, at the default log level, prints how many memories of how
many users a migration will change and why before it runs, what it did after, and names the
backup it took with how to put it back. The tables that say which migrations do that, and
which SelfMind version first knows each migration, cover every migration."""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bots.cli import app
from core import __version__
from core.memory.service import MemoryService
from core.runtime import open_store
from core.store.effects import Change, Effect, Notes
from core.store.migrations import BACKENDS, STEPS, Backend
from core.store.schema import RELEASES, first_version, first_version_of, unversioned, version_key
from tests.conftest import run_sync
from tests.core.rules.test_text_hygiene import write_raw

AWS_ID = "AKIA" + "Z7Q2XK4M9TBW3HJD"


def secrets_migration(db_url: str) -> tuple[int, str]:
    return (
        (14, "m014_redact_secrets")
        if db_url.startswith("sqlite:///")
        else (
            12,
            "m012_redact_secrets",
        )
    )


def test_db_migrate_says_what_a_migration_erases_before_and_after(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SELFMIND_LOG_LEVEL", raising=False)

    async def setup() -> list[int]:
        store = await open_store(db_url)
        service = MemoryService(store)
        try:
            ids = [
                (await service.remember(user_key="cli:bob", text=text)).id
                for text in ("The user drinks green tea.", "The user has a staging key.")
            ]
            await service.remember(user_key="cli:carol", text="The user likes rain.")
            return ids
        finally:
            await store.close()

    tea, key = run_sync(setup())
    number, name = secrets_migration(db_url)
    # bob's second memory as a SelfMind before the secret check could store it
    run_sync(
        write_raw(
            db_url,
            [
                ("UPDATE memories SET text = ? WHERE id = ?", (f"Bob's key is {AWS_ID}.", key)),
                ("DELETE FROM schema_migrations WHERE number = ?", (number,)),
            ],
        )
    )
    # --dry-run: the same lines from a copy; the store is left as it is (still behind)
    will = (
        f"{name} will erase 1 memory of 1 user: memories holding a secret (a password, key or"
        " token) stored before the secret check are erased"
    )
    dry = CliRunner().invoke(app, ["--db", db_url, "db", "migrate", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] and report["applied_now"] == [name]
    assert report["notes"][0].startswith(will)
    assert report["notes"][1] == f"would apply {name}: erased 1 memory of 1 user"
    dry = CliRunner().invoke(app, ["--db", db_url, "db", "migrate", "--dry-run"])
    assert dry.stdout.splitlines()[-1] == "dry run: nothing was changed (1 migrations to apply)"
    behind = CliRunner().invoke(app, ["--db", db_url, "users"])
    assert behind.exit_code == 1 and name in behind.stderr  # not migrated
    result = CliRunner().invoke(app, ["--db", db_url, "db", "migrate"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    will_line, will = will, next(i for i, ln in enumerate(lines) if ln.startswith(f"{name} will "))
    assert lines[will].startswith(will_line), lines
    assert lines[will + 1] == f"applied {name}: erased 1 memory of 1 user", lines
    assert AWS_ID not in result.stdout and "staging" not in result.stdout  # counts, no text
    if db_url.startswith("sqlite:///"):
        db = Path(db_url.removeprefix("sqlite:///"))
        assert lines[0].startswith("backed up the database to ")
        backup = Path(lines[0].removeprefix("backed up the database to "))
        assert backup.is_file()
        assert lines[1] == (
            f"to undo this upgrade: stop every SelfMind process, delete {db.name}-wal and"
            f" {db.name}-shm beside it if present, run: mv {backup} {db}, and reinstall the"
            " SelfMind you had"
        )
        assert will == 2  # said before it ran, after the backup
    else:
        assert lines[0].startswith("no backup taken (PostgreSQL): to undo this upgrade")

    async def bobs() -> list[int]:
        store = await open_store(db_url)
        try:
            return [m.id for m in await store.list_memories(user_key="cli:bob")]
        finally:
            await store.close()

    assert run_sync(bobs()) == [tea]


async def test_a_migration_without_its_own_count_is_reported_by_counting_again() -> None:
    """A SQL migration declares only ``count``: what it did is the count before minus after."""
    rows = [[3, 2]]

    async def fetch(sql: str, args: Sequence[Any]) -> Sequence[Sequence[Any]]:
        return rows

    async def count(fetch_: Any) -> Change:
        found = (await fetch_("SELECT count(*), count(DISTINCT uid) FROM memories", ()))[0]
        return Change(found[0], found[1])

    said: list[str] = []
    notes = Notes({"m099_x": Effect("retire", "retired", "they are stale", count)}, said.append)
    before = await notes.before("m099_x", fetch)
    rows[:] = [[1, 1]]  # the migration ran; one was left
    notes.applied(await notes.after("m099_x", fetch, before, None))
    assert said == [
        "m099_x will retire 3 memories of 2 users: they are stale",
        "applied m099_x: retired 2 memories of 1 user",
    ]
    # nothing to change: nothing said but the plain line
    rows[:] = [[0, 0]]
    assert await notes.before("m099_x", fetch) is None
    assert await notes.after("m099_x", fetch, None, None) == "applied m099_x"
    quiet: list[str] = []
    plain = Notes({}, quiet.append)
    plain.applied(await plain.after("m001_y", fetch, await plain.before("m001_y", fetch), None))
    assert quiet == ["applied m001_y"]


WRITES_MEMORIES = re.compile(r"\b(UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+memories\b", re.I)


@pytest.mark.parametrize("which", BACKENDS)
def test_every_migration_that_may_change_memories_declares_what_it_changes(
    which: Backend,
) -> None:
    """A step whose form is Python, or SQL that writes the memories table, declares its
    ``effect`` (it says what it will change) or why it changes no memory (``unchanged``)."""
    undeclared = [
        form.name
        for step in STEPS
        if (form := step.form(which))
        and (callable(form.body) or WRITES_MEMORIES.search(form.body))
        and step.effect is None
        and step.unchanged is None
    ]
    assert undeclared == [], "declare their effect (or why unchanged) in core.store.migrations"
    assert not [s.key for s in STEPS if s.effect is not None and s.unchanged is not None]
    for step in STEPS:
        form = step.form(which)
        if step.effect is not None and form is not None and callable(form.body):
            # a Python one reports its own Change
            assert "Change" in str(inspect.signature(form.body).return_annotation), form.name


@pytest.mark.parametrize("which", BACKENDS)
def test_every_migration_has_the_first_version_that_knows_it(which: Backend) -> None:
    keys = [step.key for step in STEPS]
    assert unversioned(keys) == []
    # a step added without a release row is caught
    assert unversioned([*keys, "from_a_later_branch"]) == ["from_a_later_branch"]
    assert first_version(which, 1) == RELEASES[0].version
    # the numbers stores recorded before the one list map to the versions they had
    old = {"sqlite": (16, 17, 22), "postgres": (13, 14, 19)}[which]
    assert [first_version(which, n) for n in old] == ["0.1.0", "0.2.0", "0.2.0"]
    assert first_version(which, 23) == "0.3.0" == first_version_of("usage_kind_consolidation")
    assert first_version(which, 999) is None and first_version_of("nope") is None


def test_the_newest_release_is_this_version_and_versions_only_move_forward() -> None:
    assert RELEASES[-1].version == __version__
    keys = [version_key(r.version) for r in RELEASES]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    steps = [step.key for step in STEPS]
    bounds = [steps.index(r.newest) for r in RELEASES]
    assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds)
    assert RELEASES[-1].newest == STEPS[-1].key
    pyproject = (Path(__file__).parents[3] / "pyproject.toml").read_text(encoding="utf-8")
    assert 'dynamic = ["version"]' in pyproject and 'attr = "core.__version__"' in pyproject


def test_version_shows_this_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"selfmind {__version__}\n")
    assert __version__ != "0.1.0"  # it moved with 22 schema changes


@pytest.mark.sqlite_only
async def test_the_bots_start_logs_what_a_migration_erases_at_warning(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No one reads stdout at a bot's start: the same two lines go to the log at WARNING,
    which the default level (INFO) shows."""
    store = await open_store(db_url)
    try:
        key = (await MemoryService(store).remember(user_key="cli:bob", text="A key.")).id
    finally:
        await store.close()
    await write_raw(
        db_url,
        [
            ("UPDATE memories SET text = ? WHERE id = ?", (f"Bob's key is {AWS_ID}.", key)),
            ("DELETE FROM schema_migrations WHERE number = 14", ()),
        ],
    )
    caplog.set_level(logging.WARNING)
    store = await open_store(db_url, migrate=True)
    await store.close()
    said = [r.getMessage() for r in caplog.records if r.name == "core.store.effects"]
    assert [r.levelname for r in caplog.records if r.name == "core.store.effects"] == [
        "WARNING"
    ] * 2
    assert said[0].startswith("m014_redact_secrets will erase 1 memory of 1 user: ")
    assert said[1] == "applied m014_redact_secrets: erased 1 memory of 1 user"
    assert AWS_ID not in caplog.text
