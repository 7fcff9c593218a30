"""``selfmind db migrate`` and ``selfmind db copy``: a SQLite memory file moves into
PostgreSQL without loss."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import asyncpg
import pytest
from typer.testing import CliRunner

from bots.cli import app
from core.memory.service import MemoryService
from core.rules.cleanup_ops import RetireOp
from core.rules.dedupe import Deduper
from core.runtime import open_store
from core.store.database import database, migrate
from core.store.postgres.admin import NOT_COPIED, TABLES, copy_sqlite_to_postgres
from core.store.seams import FeedbackRow, Store
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory, NewTurn, UsageRecord, utcnow
from tests.conftest import fresh_pg_database

ALICE, BOB = "slack:T1:UALICE", "discord:42"
SENT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


async def fill(store: SQLiteStore) -> dict[str, int]:
    service = MemoryService(store)
    ids = {}
    for name, text in [
        ("tabs", "The user prefers tabs over spaces."),
        ("paris", "The user lives in Paris."),
        ("tea", "The user likes green tea."),
        ("standup", "The user has a standup at 9:30 every day."),
        ("secret", "The user's locker code is 4711."),
    ]:
        ids[name] = (await service.remember(user_key=ALICE, text=text)).id
    berlin = await store.add(
        user_key=ALICE,
        memory=NewMemory(text="The user moved to Berlin.", kind="correction"),
        dedupe=Deduper(),
        supersedes=[ids["paris"]],
    )
    ids["berlin"] = berlin.id
    await service.forget(user_key=ALICE, memory_id=ids["secret"])
    await store.apply_change(user_key=ALICE, change_id="c1", ops=[RetireOp(ids["standup"])])
    ids["bob"] = (await service.remember(user_key=BOB, text="The user rides a bike.")).id
    await store.put_embeddings(user_key=ALICE, model="m", items=[(ids["tabs"], b"\x00\x01" * 8)])
    context = await store.add_turn(turn=NewTurn(
        conversation_key="C1:1", user_key=BOB, role="user", text="hi all", origin="shared",
        sent_at=SENT,
    ))  # fmt: skip
    asked = await store.add_turn(turn=NewTurn(
        conversation_key=f"dm:{ALICE}", user_key=ALICE, role="user", text="I use vim",
        origin="private", sent_at=SENT, reflection="answering", workspace="T1",
        thread_ref="slack:T1:D1:1.0",
    ))  # fmt: skip
    # Where the answer shows (crash-recovery data): copied with the turn.
    await store.set_reply_ref(turn_id=asked, reply_ref="slack:T1:D1:2.0")
    await store.finish_turn(turn_id=asked, answer="Noted.", recalled=[ids["tabs"], ids["tea"]])
    ids["context"], ids["pending"] = context, asked
    assert await store.claim_event(keys=["event:Ev1", "msg:D1:1.0"])
    await store.set_mode(user_key=BOB, mode="paused")
    assert await store.mark_once(mark="notice:alice")
    # A usage row of a turn deleted since (the largest turn id the store named).
    await store.record_usage(usage=UsageRecord(
        user_key=ALICE, workspace="T1", kind="chat", model="claude", input_tokens=10,
        output_tokens=5, cache_read_input_tokens=2, cache_creation_input_tokens=1, at=SENT,
        turn_id=asked + 7,
    ))  # fmt: skip
    ids["usage_turn"] = asked + 7
    await store.record_feedback(
        answer_ref="slack:T1:D1:2.0", user_key=ALICE, workspace="T1", positive=True, at=SENT
    )
    # An Undo button's token (alive for the 7-day undo window): it works after the move.
    await store.put_pending(
        token="undo-token-1", user_key=ALICE, kind="undo", payload="c1",
        expires_at=utcnow() + timedelta(days=7),
    )  # fmt: skip
    return ids


async def snapshot(store: Store) -> dict[str, object]:
    """What a user of the store can see, for comparing two stores."""
    out: dict[str, object] = {}
    for user in (ALICE, BOB):
        out[user] = {
            "memories": [
                (m.id, m.text, m.kind, m.origin, m.created_at, m.updated_at, m.superseded_by)
                for m in await store.list_memories(
                    user_key=user, limit=100, include_superseded=True
                )
            ],
            "history": [
                (e.memory_id, e.event, e.at, e.related_id, e.change_id)
                for e in await store.history(user_key=user)
            ],
            "count": await store.count(user_key=user),
            "mode": await store.get_mode(user_key=user),
            "tabs": [s.memory.id for s in await store.search(user_key=user, query="tabs", k=6)],
        }
    out["turns"] = await store.recent_turns(conversation_key=f"dm:{ALICE}", limit=10)
    out["usage"] = await store.usage_report(since=SENT, by="user")
    out["embeddings"] = await store.active_embeddings(user_key=ALICE, model="m")
    out["stats"] = await store.stats()
    out["uses"] = await store.memory_uses(user_key=ALICE)
    out["feedback"] = await store.feedback_report(since=SENT)
    return out


async def test_copy_moves_everything_and_counts_match(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    source = await SQLiteStore.open(str(path))
    try:
        ids = await fill(source)
        before = await snapshot(source)
    finally:
        await source.close()
    with fresh_pg_database(migrated=False) as url:
        code, out, err = await asyncio.to_thread(
            cli, "db", "copy", "--from", f"sqlite:///{path}", "--to", url, "--json"
        )
        assert code == 0, err
        report = json.loads(out)
        assert report["ok"] is True
        counts = {c["table"]: (c["source"], c["target"]) for c in report["counts"]}
        assert counts["memories"] == (6, 6) and counts["memory_events"][0] >= 10
        assert counts["turns"] == (3, 3) and counts["usage"] == (1, 1)
        assert counts["feedback"] == (1, 1) and counts["positive ratings"] == (1, 1)
        assert counts["pending_actions"] == (1, 1)
        assert all(s == t for s, t in counts.values())

        copy = await open_store(url)
        try:
            assert await snapshot(copy) == before
            turn = await copy.get_turn(turn_id=ids["pending"])
            assert turn is not None
            assert (turn.reply_ref, turn.thread_ref) == ("slack:T1:D1:2.0", "slack:T1:D1:1.0")
            assert before[ALICE]["tabs"] == [ids["tabs"]]  # type: ignore[index]
            # The reflection that was waiting is taken over by the first replica to look.
            assert [t.id for t in await copy.turns_to_reflect()] == [ids["pending"]]
            assert await copy.claim_event(keys=["msg:D1:1.0"]) is False
            assert await copy.mark_once(mark="notice:alice") is False
            taken = await copy.take_pending(
                token="undo-token-1", user_key=ALICE, kind="undo", now=utcnow()
            )
            assert taken == "c1"
            # New ids continue after every id the history names (a forgotten one too).
            added = await MemoryService(copy).remember(user_key=ALICE, text="The user codes.")
            assert added.id > max(v for k, v in ids.items() if k != "usage_turn")
            # Turn ids continue after every id usage names (a deleted turn's too).
            turn = NewTurn(
                conversation_key="C1:1", user_key=BOB, role="user", text="hi", origin="shared",
                sent_at=SENT,
            )  # fmt: skip
            assert await copy.add_turn(turn=turn) > ids["usage_turn"]
        finally:
            await copy.close()

        # Copying into a database that holds data is refused, and changes nothing.
        code, _, err = await asyncio.to_thread(cli, "db", "copy", "--from", str(path), "--to", url)
        assert code == 1 and "already holds data" in err and err.count("\n") == 1


async def test_copy_never_gives_a_new_turn_the_id_of_a_deleted_one(tmp_path: Path) -> None:
    """The SQLite store never reuses a turn id (AUTOINCREMENT); neither does its copy: the
    sequence continues after the largest id SQLite ever gave, so a deleted turn's recovery
    claim (``recover:{id}``) cannot refuse a new turn's."""

    def asked(user: str, text: str) -> NewTurn:
        return NewTurn(
            conversation_key=f"{user}:s", user_key=user, role="user", text=text,
            origin="private", sent_at=SENT, reflection="answering",
        )  # fmt: skip

    path = tmp_path / "memory.db"
    source = await SQLiteStore.open(str(path))
    try:
        await source.add_turn(turn=asked(BOB, "hi"))
        last = await source.add_turn(turn=asked(ALICE, "I live in Oslo"))
        assert await source.claim_event(keys=[f"recover:{last}"])
        await source.forget_all(user_key=ALICE)  # the turn of the largest id is gone
    finally:
        await source.close()
    with fresh_pg_database(migrated=False) as url:
        code, _, err = await asyncio.to_thread(
            cli, "db", "copy", "--from", f"sqlite:///{path}", "--to", url
        )
        assert code == 0, err
        copy = await open_store(url)
        try:
            new = await copy.add_turn(turn=asked(BOB, "next"))
            assert new > last
            assert await copy.claim_event(keys=[f"recover:{new}"])
        finally:
            await copy.close()


async def test_copy_names_every_column_of_the_tables_it_copies(tmp_path: Path) -> None:
    """A column a migration adds is copied too (``reply_ref`` and ``thread_ref`` once were
    not); only the users' BM25 totals are left out: the target's triggers recompute them."""
    store = await SQLiteStore.open(str(tmp_path / "m.db"))
    try:
        for table in TABLES:
            rows = await store._fetchall(f"SELECT name FROM pragma_table_info('{table.name}')")
            missing = {r[0] for r in rows} - set(table.columns)
            assert missing == ({"n_docs", "total_len"} if table.name == "users" else set())
    finally:
        await store.close()


async def test_every_table_is_copied_or_left_with_a_reason(tmp_path: Path) -> None:
    """Each table of a freshly migrated SQLite store is copied (``TABLES``) or named in
    ``NOT_COPIED`` with its reason; a table a migration adds cannot be left behind unseen
    (``feedback``, the users' ratings, once was). SQLite's own tables (``sqlite_*``) and
    FTS5's shadow tables are its internals, not the store's."""
    store = await SQLiteStore.open(str(tmp_path / "m.db"))
    try:
        rows = await store._fetchall(
            "SELECT name FROM pragma_table_list WHERE schema = 'main'"
            " AND type IN ('table', 'virtual') AND substr(name, 1, 7) <> 'sqlite_'"
        )
    finally:
        await store.close()
    tables = {str(r[0]) for r in rows}
    copied = {t.name for t in TABLES}
    assert {"feedback", "pending_actions", "memories_fts_0"} <= tables  # the query sees them
    assert tables - copied - set(NOT_COPIED) == set()  # neither copied nor skipped
    assert copied <= tables and set(NOT_COPIED) <= tables  # no stale name in either list
    assert copied.isdisjoint(NOT_COPIED)
    assert all(reason.strip() for reason in NOT_COPIED.values())


async def test_copy_keeps_every_rating_and_the_feedback_report(tmp_path: Path) -> None:
    """Ratings (a boolean stored as 0/1 in SQLite) arrive as they were, and the feedback
    report (by UTC day and workspace) reads the same on both sides."""
    late = datetime(2026, 11, 30, 19, 30, 0, 123456, tzinfo=timezone(timedelta(hours=-5)))
    ratings = [  # (answer, user, workspace, positive, at)
        ("slack:T1:D1:1.0", ALICE, "T1", True, late),  # 00:30 UTC on Dec 1
        ("slack:T1:D1:2.0", ALICE, "T1", False, SENT),
        ("slack:T1:C1:3.0", "slack:T1:UCAROL", "T1", True, SENT),
        ("discord:7:8", BOB, None, False, SENT - timedelta(days=1)),
        ("discord:7:8", BOB, None, True, SENT),  # a second click replaces the first
    ]
    path = tmp_path / "memory.db"
    source = await SQLiteStore.open(str(path))
    try:
        for answer, user, workspace, positive, at in ratings:
            await source.record_feedback(
                answer_ref=answer, user_key=user, workspace=workspace, positive=positive, at=at
            )
        since = SENT - timedelta(days=30)
        before = await source.feedback_report(since=since)
    finally:
        await source.close()
    assert len(before) == 3 and sum(r.positive + r.negative for r in before) == 4

    with fresh_pg_database(migrated=False) as url:
        report = await copy_sqlite_to_postgres(f"sqlite:///{path}", url)
        assert report.ok, report
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch(
                "SELECT answer_ref, user_key, workspace, positive, at FROM feedback"
            )
        finally:
            await conn.close()
        assert sorted(tuple(r) for r in rows) == sorted(
            [
                ("discord:7:8", BOB, None, True, SENT),
                ("slack:T1:C1:3.0", "slack:T1:UCAROL", "T1", True, SENT),
                ("slack:T1:D1:1.0", ALICE, "T1", True, late),
                ("slack:T1:D1:2.0", ALICE, "T1", False, SENT),
            ]
        )
        copy = await open_store(url)
        try:
            assert await copy.feedback_report(since=since) == before
            # The key came along: a new click on a copied rating replaces it.
            await copy.record_feedback(
                answer_ref="slack:T1:D1:2.0", user_key=ALICE, workspace="T1", positive=True,
                at=SENT,
            )  # fmt: skip
            after = await copy.feedback_report(since=since)
            assert FeedbackRow(SENT.date().isoformat(), "T1", 2, 0) in after
            assert sum(r.positive + r.negative for r in after) == 4
        finally:
            await copy.close()


async def test_copy_refuses_a_target_that_holds_only_ratings(tmp_path: Path) -> None:
    """A database where a replica already took ratings is not empty: the copy refuses it
    and writes nothing (before ``feedback`` was copied, such a database passed as empty)."""
    path = tmp_path / "memory.db"
    source = await SQLiteStore.open(str(path))
    try:
        await MemoryService(source).remember(user_key=ALICE, text="The user likes green tea.")
        await source.record_feedback(
            answer_ref="slack:T1:D1:2.0", user_key=ALICE, workspace="T1", positive=True, at=SENT
        )
    finally:
        await source.close()
    with fresh_pg_database() as url:
        target = await open_store(url)
        try:
            await target.record_feedback(
                answer_ref="discord:7:8", user_key=BOB, workspace=None, positive=False, at=SENT
            )
        finally:
            await target.close()
        code, _, err = await asyncio.to_thread(
            cli, "db", "copy", "--from", f"sqlite:///{path}", "--to", url
        )
        assert code == 1 and "already holds data (table feedback)" in err
        copy = await open_store(url)
        try:
            assert await copy.count(user_key=ALICE) == 0
            assert await copy.feedback_report(since=SENT) == [
                FeedbackRow(SENT.date().isoformat(), None, 0, 1)
            ]
        finally:
            await copy.close()


async def test_copy_rejects_wrong_schemes(tmp_path: Path) -> None:
    code, _, err = await asyncio.to_thread(
        cli, "db", "copy", "--from", str(tmp_path / "m.db"), "--to", str(tmp_path / "x.db")
    )
    assert code == 1 and "--to must be a postgresql:// URL" in err


async def test_migrate_is_idempotent_and_safe_to_race() -> None:
    with fresh_pg_database(migrated=False) as url:
        code, out, err = await asyncio.to_thread(cli, "--db", url, "db", "migrate", "--json")
        assert code == 0, err
        first = json.loads(out)
        assert first["applied_now"] == first["applied"] and len(first["applied"]) >= 4
        code, out, _ = await asyncio.to_thread(cli, "--db", url, "db", "migrate", "--json")
        again = json.loads(out)
        assert again["applied_now"] == [] and again["applied"] == first["applied"]
        assert again["backup"] is None and again["notes"] == [] and again["dry_run"] is False
    with fresh_pg_database(migrated=False) as url:
        reports = await asyncio.gather(*(migrate(database(url)) for _ in range(4)))
        applied_now = [name for r in reports for name in r.applied_now]
        assert sorted(applied_now) == sorted(first["applied"])  # each exactly once


@pytest.mark.real_migrations
async def test_migrate_sqlite_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    code, out, _ = await asyncio.to_thread(cli, "--db", url, "db", "migrate")
    assert code == 0 and "schema up to date" in out and "applied m001_initial" in out
    code, out, _ = await asyncio.to_thread(cli, "--db", url, "db", "migrate")
    assert code == 0 and not out.startswith("applied")
