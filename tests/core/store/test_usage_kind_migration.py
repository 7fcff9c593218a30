"""m023, the first step of the one migration list (:mod:`core.store.migrations`): the usage
table's ``kind`` learns ``consolidation`` on both backends. An old store's usage rows come
through the upgrade as they were (SQLite rebuilds the table for the new CHECK), and the
nightly consolidation's calls show on their own line of ``selfmind usage``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from bots.cli import app
from core.runtime import open_store
from core.store.migrations import migrations_of
from tests.conftest import run_sync
from tests.core.store.test_turn_steps import usage
from tests.core.store.test_upgrades import isolated, make_store, run_sql, url  # noqa: F401

STEP = "m023_usage_kind_consolidation"
DAY = "2026-12-01T10:00:00+00:00"
OLD_ROWS = [
    # id, at, user_key, workspace, kind, model, input, output, cache read, cache write, turn
    (7, DAY, "slack:T1:UA", "T1", "chat", "claude-x", 100, 20, 5, 1, 3),
    (8, DAY, "slack:T1:UA", "T1", "reflection", "claude-x", 50, 10, 0, 0, 3),
    (9, DAY, "slack:T1:UB", None, "cleanup", "claude-y", 70, 30, 0, 0, None),
]
COLUMNS = (
    "id, at, user_key, workspace, kind, model, input_tokens, output_tokens,"
    " cache_read_input_tokens, cache_creation_input_tokens, turn_id"
)


def _insert(row: tuple[object, ...]) -> str:
    values = ", ".join("NULL" if v is None else repr(v) for v in row)
    return f"INSERT INTO usage({COLUMNS}) VALUES ({values})"


def _rows(where: str) -> list[tuple[object, ...]]:
    async def read() -> list[tuple[object, ...]]:
        if where.startswith("sqlite:///"):
            import aiosqlite

            async with aiosqlite.connect(where.removeprefix("sqlite:///")) as db:
                rows = await db.execute_fetchall(f"SELECT {COLUMNS} FROM usage ORDER BY id")
            return [tuple(r) for r in rows]
        import asyncpg

        conn = await asyncpg.connect(where)
        try:
            rows = await conn.fetch(f"SELECT {COLUMNS} FROM usage ORDER BY id")
        finally:
            await conn.close()
        return [(r[0], r[1].isoformat(), *tuple(r)[2:]) for r in rows]

    return run_sync(read())


def test_an_old_store_keeps_its_usage_and_learns_the_consolidation_kind(
    backend: str,
    url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    known = migrations_of("sqlite" if backend == "sqlite" else "postgres")
    names = [name for _, name, _ in known]
    make_store(url, backend, monkeypatch, upto=names.index(STEP))
    run_sql(url, [_insert(r) for r in OLD_ROWS])
    # the old schema refuses the new kind: the migration is what lets it in
    with pytest.raises(Exception, match=r"(?i)check"):
        run_sql(url, [_insert((10, *OLD_ROWS[0][1:4], "consolidation", *OLD_ROWS[0][5:]))])

    async def upgrade() -> None:
        store = await open_store(url, migrate=True)
        try:
            assert store.migrated[0] == STEP  # then any step after it
            await store.record_usage(usage=usage("consolidation", tokens=40))
        finally:
            await store.close()

    run_sync(upgrade())
    with pytest.raises(Exception, match=r"(?i)check"):  # the CHECK is still there
        run_sql(url, [_insert((11, *OLD_ROWS[0][1:4], "nightly", *OLD_ROWS[0][5:]))])
    rows = _rows(url)
    if backend == "sqlite":  # the rebuilt table has its indexes again
        import sqlite3

        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            indexes = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'usage'"
            ).fetchall()
        assert {n for (n,) in indexes} == {"usage_by_user", "usage_by_workspace", "usage_by_time"}
    old = [(r[0], datetime.fromisoformat(str(r[1])), *r[2:]) for r in rows if r[0] in (7, 8, 9)]
    assert old == [(r[0], datetime.fromisoformat(str(r[1])), *r[2:]) for r in OLD_ROWS]
    assert len(rows) == 4 and [r[4] for r in rows if r[0] not in (7, 8, 9)] == ["consolidation"]
    # the report: consolidation on its own line, cleanup as it was
    result = CliRunner().invoke(
        app, ["--db", url, "usage", "--since", "2026-12-01", "--by", "kind", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    by_kind = {r["kind"]: r for r in json.loads(result.stdout)["rows"]}
    assert set(by_kind) == {"chat", "reflection", "cleanup", "consolidation"}
    assert by_kind["consolidation"]["total_tokens"] == 40 + 80
    assert by_kind["cleanup"]["total_tokens"] == 100
    text = CliRunner().invoke(app, ["--db", url, "usage", "--since", "2026-12-01"])
    lines = [ln.split()[:2] for ln in text.stdout.splitlines()]
    assert ["consolidation", "1"] in lines and ["cleanup", "1"] in lines


def test_the_nightly_budget_counts_both_cleanup_kinds(db_url: str) -> None:
    """A user's own ``/memories cleanup`` and the night's consolidation spend one budget."""
    from core.memory.consolidation import Consolidator, Window

    async def spent() -> int:
        store = await open_store(db_url)
        try:
            now = datetime.now(UTC)
            for kind, tokens in (("cleanup", 10), ("consolidation", 100), ("chat", 1000)):
                await store.record_usage(usage=usage(kind, tokens=tokens))
            old = usage("consolidation", tokens=10_000)
            await store.record_usage(usage=dataclasses.replace(old, at=now - timedelta(days=2)))
            night = Consolidator(
                store=store,
                cleaner=None,  # type: ignore[arg-type]
                enabled=True,
                window=Window.parse("00:00-00:00"),
                daily_tokens=1,
            )
            return await night.spent_today(now)
        finally:
            await store.close()

    assert run_sync(spent()) == 3 * 10 + 3 * 100
