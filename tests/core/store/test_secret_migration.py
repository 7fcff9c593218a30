"""The migration that removes secrets stored before the secret check (SQLite
``m014_redact_secrets``, PostgreSQL ``m012_redact_secrets``), on both backends: memories
carrying one are erased (counted), chat messages redacted, pending actions deleted."""

from __future__ import annotations

import logging
import sqlite3
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from core.memory.service import MemoryService
from core.rules.text import index_terms
from core.runtime import open_store
from core.types import NewTurn
from tests.core.rules.test_text_hygiene import write_raw

ALICE, BOB = "slack:T1:UALICE", "discord:42"
SENT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
AWS_ID = "AKIA" + "Z7Q2XK4M9TBW3HJD"
GITHUB = "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"


def number(db_url: str) -> int:
    return 14 if db_url.startswith("sqlite:///") else 12


async def test_migration_erases_secret_memories_and_redacts_messages(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_store(db_url)
    service = MemoryService(store)
    try:
        tea = (await service.remember(user_key=ALICE, text="The user drinks green tea.")).id
        key = (await service.remember(user_key=ALICE, text="The user has a staging key.")).id
        old = (await service.remember(user_key=ALICE, text="The user had a GitHub token.")).id
        new = (await service.remember(user_key=ALICE, text="The user rotates tokens.")).id
        bobs = (await service.remember(user_key=BOB, text="The user's PIN is secret.")).id
        turn = await store.add_turn(turn=NewTurn(
            conversation_key="c", user_key=ALICE, role="user", text="x", origin="private",
            sent_at=SENT,
        ))  # fmt: skip
        clean_turn = await store.add_turn(turn=NewTurn(
            conversation_key="c", user_key=ALICE, role="user",
            text="commit 3f786850e387550fdab836ed7e6dc881de23001b is the fix", origin="private",
            sent_at=SENT,
        ))  # fmt: skip
        await store.put_pending(
            token="plan-with-a-secret",
            user_key=ALICE,
            kind="cleanup_plan",
            payload=f'{{"texts": {{"{key}": "key {AWS_ID}"}}}}',
            expires_at=datetime.now(UTC) + timedelta(hours=1),
            replace=False,
        )
    finally:
        await store.close()
    # What an old version could store: secrets in memories (one of them superseded, its
    # successor's history pointing at it), in a message, in a plan. Index terms from the
    # words, so the secret is in the search index too.
    key_text = f"The user's staging AWS key is {AWS_ID}."
    old_text = f"The user's GitHub token is {GITHUB}."
    bob_text = "The user's PIN is 4711."
    await write_raw(
        db_url,
        [
            ("UPDATE memories SET text = ? WHERE id = ?", (key_text, key)),
            ("UPDATE memories SET text = ? WHERE id = ?", (old_text, old)),
            ("UPDATE memories SET text = ? WHERE id = ?", (bob_text, bobs)),
            ("UPDATE memories SET superseded_by = ? WHERE id = ?", (new, old)),
            (
                "INSERT INTO memory_events(uid, memory_id, event, at, related_id)"
                " SELECT uid, id, 'superseded', created_at, ? FROM memories WHERE id = ?",
                (new, old),
            ),
            (
                "UPDATE turns SET text = ? WHERE id = ?",
                (f"my key is {AWS_ID}\nand the PIN is 4711", turn),
            ),
            ("DELETE FROM schema_migrations WHERE number = ?", (number(db_url),)),
        ],
    )
    await write_terms(db_url, {key: key_text, old: old_text, bobs: bob_text})
    caplog.set_level(logging.INFO, logger="core.store.secret_repair")
    store = await open_store(db_url, migrate=True)
    service = MemoryService(store)
    try:
        assert any("redact_secrets" in name for name in await store.applied_migrations())
        alice = await store.list_memories(user_key=ALICE, include_superseded=True)
        assert sorted(m.id for m in alice) == sorted([tea, new])
        assert await service.list_memories(user_key=BOB) == []
        events = [(e.memory_id, e.event) for e in await service.history(user_key=ALICE)]
        assert (key, "forgotten") in events and (old, "forgotten") in events
        assert [
            m.memory.id for m in await service.search(user_key=ALICE, query="staging key")
        ] == []
        assert [m.memory.id for m in await service.search(user_key=ALICE, query="tea")] == [tea]
        assert (await service.stats(user_key=ALICE)).total == 2
        by_id = {t.id: t.text for t in await store.recent_turns(conversation_key="c", limit=5)}
        assert by_id[turn] == "my key is [redacted: aws key]\nand the PIN is [redacted: pin]"
        assert by_id[clean_turn].startswith("commit 3f786850")
        assert await store.take_pending(
            token="plan-with-a-secret", user_key=ALICE, kind="cleanup_plan", now=datetime.now(UTC)
        ) is None  # fmt: skip
        # the store stays consistent: the fact can be learned again without the secret
        again = await service.remember(user_key=ALICE, text="The user has a staging key.")
        assert again.status == "added"
    finally:
        await store.close()
    assert (
        "secrets removed from the store: 3 memories erased (2 users), 1 messages redacted,"
        " 1 pending actions deleted"
    ) in caplog.text
    if db_url.startswith("sqlite:///"):
        path = db_url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path)
        try:
            for shard in range(32):
                fts = f"memories_fts_{shard}"
                conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')")
            totals = conn.execute(
                "SELECT u.n_docs, count(m.id) FROM users u LEFT JOIN memories m"
                " ON m.uid = u.uid AND m.superseded_by IS NULL GROUP BY u.uid"
            ).fetchall()
            assert all(r[0] == r[1] for r in totals), totals
            conn.commit()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        with open(path, "rb") as f:
            data = f.read()
        assert AWS_ID.encode() not in data and AWS_ID.lower().encode() not in data


async def write_terms(db_url: str, texts: dict[int, str]) -> None:
    """Give memories the index terms of their (raw-written) texts, as the old version did."""
    statements: list[tuple[str, tuple[object, ...]]] = []
    for memory_id, text in texts.items():
        terms = index_terms(await _uid(db_url, memory_id), text)
        statements.append(
            (
                "UPDATE memories SET terms = ?, n_terms = ? WHERE id = ?",
                (" ".join(terms), len(terms), memory_id),
            )
        )
    await write_raw(db_url, statements)


async def _uid(db_url: str, memory_id: int) -> int:
    sql = "SELECT uid FROM memories WHERE id = ?"
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            return int(conn.execute(sql, (memory_id,)).fetchone()[0])
        finally:
            conn.close()
    pg = await asyncpg.connect(db_url)
    try:
        return int(await pg.fetchval(sql.replace("?", "$1"), memory_id))
    finally:
        await pg.close()


async def test_migration_of_a_store_without_secrets_changes_nothing(db_url: str) -> None:
    store = await open_store(db_url)
    try:
        service = MemoryService(store)
        await service.remember(user_key=ALICE, text="The user's commit was 3f786850e387550f.")
        before = [(m.id, m.text, m.updated_at) for m in await service.list_memories(user_key=ALICE)]
    finally:
        await store.close()
    await write_raw(db_url, [("DELETE FROM schema_migrations WHERE number = ?", (number(db_url),))])
    store = await open_store(db_url, migrate=True)
    try:
        after = [
            (m.id, m.text, m.updated_at)
            for m in await MemoryService(store).list_memories(user_key=ALICE)
        ]
        assert after == before
        assert [e.event for e in await store.history(user_key=ALICE)] == ["added"]
    finally:
        await store.close()


async def test_the_issue_36_migration_removes_the_new_forms_and_logs_counts_only(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite m020 / PostgreSQL m017: what the older check let in (a card number, an IBAN, a
    password without a colon) is erased or redacted; the log has counts, never the text."""
    store = await open_store(db_url)
    service = MemoryService(store)
    try:
        tea = (await service.remember(user_key=ALICE, text="The user drinks green tea.")).id
        card = (await service.remember(user_key=ALICE, text="The user has a Visa card.")).id
        turn = await store.add_turn(turn=NewTurn(
            conversation_key="c", user_key=ALICE, role="user", text="x", origin="private",
            sent_at=SENT,
        ))  # fmt: skip
    finally:
        await store.close()
    card_text = "The user's Visa card is 4111 1111 1111 1111."
    message = "my IBAN is DE89 3704 0044 0532 0130 00 and the password, hunter2, expires"
    number = 20 if db_url.startswith("sqlite:///") else 17
    await write_raw(
        db_url,
        [
            ("UPDATE memories SET text = ? WHERE id = ?", (card_text, card)),
            ("UPDATE turns SET text = ? WHERE id = ?", (message, turn)),
            ("DELETE FROM schema_migrations WHERE number = ?", (number,)),
        ],
    )
    caplog.set_level(logging.DEBUG, logger="core.store.secret_repair")
    store = await open_store(db_url, migrate=True)
    try:
        assert f"m{number:03d}_redact_secret_forms" in await store.applied_migrations()
        memories = await store.list_memories(user_key=ALICE, include_superseded=True)
        assert [m.id for m in memories] == [tea]
        (text,) = [t.text for t in await store.recent_turns(conversation_key="c", limit=5)]
        assert text == (
            "my IBAN is [redacted: iban] and the password, [redacted: password], expires"
        )
    finally:
        await store.close()
    assert (
        "secrets removed from the store: 1 memories erased (1 users), 1 messages redacted,"
        " 0 pending actions deleted"
    ) in caplog.text
    assert "4111" not in caplog.text and "hunter2" not in caplog.text
