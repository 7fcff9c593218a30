"""Text hygiene on every path into the store (remember, import, reflection, messages, turns,
the migration of rows stored before, ``db copy``), on both backends: NUL, C0/C1 controls,
bidirectional overrides, zero-width spaces and BOMs go; ZWJ/ZWNJ (emoji sequences, Persian)
and LRM/RLM stay."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from core.chat.loop import EMPTY_MESSAGE, ContextMessage
from core.errors import ImportFormatError, MemoryInputError
from core.memory.reflection import check_text
from core.memory.service import MemoryService, parse_user_key
from core.rules.text import clean_text, index_terms, needs_cleaning, stems, words
from core.runtime import open_store
from core.store.postgres.admin import copy_sqlite_to_postgres
from core.store.seams import Store
from core.store.sqlite.migrations import FTS_SHARDS
from core.store.sqlite.store import SQLiteStore
from core.types import NewTurn
from tests.conftest import fresh_pg_database
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.loop_helpers import dm, harness, memories_reply

ALICE, BOB = "slack:T1:UALICE", "discord:42"
SENT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

NUL, ESC, NEL, CSI, RLO = "\x00", "\x1b", "\x85", "\x9b", "\u202e"
ZWSP, BOM, ZWJ, ZWNJ, LRM, RLM = "\u200b", "\ufeff", "\u200d", "\u200c", "\u200e", "\u200f"
CODER = "\U0001f469\u200d\U0001f4bb"  # woman technologist: 👩 ZWJ 💻
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # 👨 ZWJ 👩 ZWJ 👧
PERSIAN = "می\u200cخواهم"  # "I want", ZWNJ inside the word
REMOVED = [NUL, ESC, CSI, RLO, ZWSP, BOM, "\x07", "\x7f", "\u202a", "\u2066", "\u2069"]


def assert_clean(text: str) -> None:
    assert not needs_cleaning(text), repr(text)
    for ch in [*REMOVED, NEL, "\r"]:
        assert ch not in text, (ch, text)


# ---------------------------------------------------------------- the rule itself
@pytest.mark.parametrize("ch", [*REMOVED, "\x01", "\x1f", "\x80", "\x9f", "\u202c", "\u2067"])
def test_removed_characters(ch: str) -> None:
    assert clean_text(f"a{ch}b", keep_newlines=True) == "ab"
    assert clean_text(f"a{ch}b", keep_newlines=False) == "ab"


@pytest.mark.parametrize(
    "kept", [ZWJ, ZWNJ, LRM, RLM, CODER, FAMILY, PERSIAN, "é", "日本", "\u00ad"]
)
def test_kept_characters(kept: str) -> None:
    text = f"The user writes {kept} often."
    assert clean_text(text, keep_newlines=True) == text
    assert clean_text(text, keep_newlines=False) == text
    assert not needs_cleaning(text)


def test_line_ends_and_tabs() -> None:
    raw = f"one\r\ntwo\rthree{NEL}four\x0bfive\x0csix\tseven\n"
    assert clean_text(raw, keep_newlines=True) == "one\ntwo\nthree\nfour\nfive\nsix\tseven\n"
    assert clean_text(raw, keep_newlines=False) == "one two three four five six seven"


def test_lone_surrogates_are_removed() -> None:
    # JSON "\ud800" decodes to a lone surrogate, which UTF-8 (and so both stores) cannot hold.
    raw = json.loads('"The user likes \\ud800tea."')
    cleaned = clean_text(raw, keep_newlines=False)
    assert cleaned == "The user likes tea."
    cleaned.encode("utf-8")


def test_idempotent_and_index_terms_unchanged() -> None:
    raw = f"{BOM}The {RLO}user{NUL} uses {CODER} and {PERSIAN}\u200b.{ESC}"
    once = clean_text(raw, keep_newlines=False)
    assert clean_text(once, keep_newlines=False) == once
    assert once == f"The user uses {CODER} and {PERSIAN}."
    # Tokens, stems and index terms are the same functions as before (ZWNJ splits words
    # for recall as it always did).
    assert words(PERSIAN) == ["می", "خواهم"]
    assert stems("The users prefer") == ["the", "user", "prefer"]
    assert index_terms(3, "prefers vim") == ["u3_prefer", "u3_vim"]


# ---------------------------------------------------------------- remember and import
DIRTY = f"The user{NUL} likes {ESC}[31mgreen{CSI} tea {RLO}daily{ZWSP}.{BOM}"
DIRTY_CLEAN = "The user likes [31mgreen tea daily."


async def test_remember_cleans(service: MemoryService) -> None:
    added = await service.remember(user_key=ALICE, text=DIRTY)
    kept = await service.remember(user_key=ALICE, text=f"The user codes as {CODER} with {FAMILY}.")
    persian = await service.remember(user_key=ALICE, text=f"The user says {PERSIAN} a lot{NEL}.")
    by_id = {m.id: m.text for m in await service.list_memories(user_key=ALICE)}
    assert by_id == {
        added.id: DIRTY_CLEAN,
        kept.id: f"The user codes as {CODER} with {FAMILY}.",
        persian.id: f"The user says {PERSIAN} a lot .",
    }
    assert [s.memory.id for s in await service.search(user_key=ALICE, query="green tea")] == [
        added.id
    ]
    assert [s.memory.id for s in await service.search(user_key=ALICE, query="خواهم")] == [
        persian.id
    ]
    # The clean twin of a stored memory is a duplicate of it, not a second memory.
    again = await service.remember(user_key=ALICE, text=DIRTY.replace(NUL, ESC))
    assert again.status == "duplicate" and again.id == added.id


@pytest.mark.parametrize("raw", [NUL, f"{NUL}{ESC}{ZWSP}{BOM}{RLO}", "\x01\x02 \x03"])
async def test_remember_of_nothing_but_controls(service: MemoryService, raw: str) -> None:
    with pytest.raises(MemoryInputError):
        await service.remember(user_key=ALICE, text=raw)
    assert await service.count(user_key=ALICE) == 0


async def test_import_cleans(service: MemoryService) -> None:
    lines = [
        json.dumps({"text": DIRTY}),
        json.dumps({"text": f"The user's team is {CODER}{RLO}."}),
        '{"text": "The user drinks \\u0000coffee\\u001b \\ud800at noon."}',
        json.dumps({"text": f"The user writes {PERSIAN}."}, ensure_ascii=False),
    ]
    result = await service.import_lines(user_key=ALICE, lines=lines)
    assert (result.added, result.duplicates) == (4, 0)
    texts = sorted(m.text for m in await service.list_memories(user_key=ALICE))
    assert texts == sorted(
        [
            DIRTY_CLEAN,
            f"The user's team is {CODER}.",
            "The user drinks coffee at noon.",
            f"The user writes {PERSIAN}.",
        ]
    )


async def test_import_line_of_only_controls_names_the_line(service: MemoryService) -> None:
    lines = [json.dumps({"text": "The user likes tea."}), '{"text": "\\u0000\\u200b"}']
    with pytest.raises(ImportFormatError) as info:
        await service.import_lines(user_key=ALICE, lines=lines)
    assert info.value.line == 2
    assert await service.count(user_key=ALICE) == 0


# ---------------------------------------------------------------- messages, turns, reflection
@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=4) as f:
        yield f


MESSAGE = f"hi{NUL} there {ESC}[1m{RLO}\r\nline two\twith a tab {CODER} {PERSIAN}{BOM}{CSI}"
MESSAGE_CLEAN = f"hi there [1m\nline two\twith a tab {CODER} {PERSIAN}"


async def test_message_and_answer_are_cleaned(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        fake.enqueue(Reply(text=f"Hello{NUL} {FAMILY}{RLO}!\r\nBye."), kind="chat")
        fake.enqueue(memories_reply(), kind="extract")
        answer = await h.say(dm(ALICE, MESSAGE, author=f"Al{RLO}ice{NUL}"))
        assert answer == f"Hello{NUL} {FAMILY}{RLO}!\r\nBye."  # shown as it streamed
        assert await h.reflector.drain(10)
        turns = await h.store.recent_turns(conversation_key=f"dm:{ALICE}", limit=10)
        assert [(t.role, t.text, t.author) for t in turns] == [
            ("user", MESSAGE_CLEAN, "Alice"),
            ("assistant", f"Hello {FAMILY}!\nBye.", None),
        ]
    sent = json.dumps(fake.requests_of("chat")[0].body["messages"], ensure_ascii=False)
    assert MESSAGE_CLEAN.replace("\n", "\\n").replace("\t", "\\t") in sent
    assert "\\u0000" not in sent and RLO not in sent


async def test_message_of_only_controls(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        fake.enqueue("Did you mean to send something?", kind="chat")
        fake.enqueue(memories_reply(), kind="extract")
        await h.say(dm(ALICE, f"{NUL}{ZWSP}{ESC}"))
        assert await h.reflector.drain(10)
        turns = await h.store.recent_turns(conversation_key=f"dm:{ALICE}", limit=10)
        assert [t.text for t in turns] == [EMPTY_MESSAGE, "Did you mean to send something?"]


async def test_context_messages_are_cleaned(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        await h.loop.seed_context(
            conversation_key="C1:1",
            origin="shared",
            messages=[
                ContextMessage(text=MESSAGE, author=f"B{NUL}ob", user_key=BOB, sent_at=SENT),
                ContextMessage(text=f"ok{ESC}", role="assistant", sent_at=SENT),
            ],
        )
        turns = await h.store.recent_turns(conversation_key="C1:1", limit=10)
        assert [(t.text, t.author) for t in turns] == [(MESSAGE_CLEAN, "Bob"), ("ok", None)]


async def test_reflection_cleans(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        fake.enqueue("Nice!", kind="chat")
        fake.enqueue(
            memories_reply(
                (f"The user{NUL} works as a {CODER}{RLO} developer.", "fact", "workflow"),
                (f"The user says {PERSIAN}{ZWSP} when{ESC} asking.", "fact", "communication"),
                (f"{NUL}{BOM}", "fact", "general"),
            ),
            kind="extract",
        )
        await h.say(dm(ALICE, "I'm a developer"))
        assert await h.reflector.drain(10)
        texts = sorted(m.text for m in await h.service.list_memories(user_key=ALICE))
    assert texts == [
        f"The user says {PERSIAN} when asking.",
        f"The user works as a {CODER} developer.",
    ]


# ---------------------------------------------------------------- rows stored before
async def write_raw(db_url: str, statements: list[tuple[str, tuple[object, ...]]]) -> None:
    """Run SQL on the store's database behind the store's back, as an old version would
    have written (``?`` placeholders)."""
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            for sql, args in statements:
                conn.execute(sql, args)
            conn.commit()
        finally:
            conn.close()
        return
    from core.store.postgres.migrations import numbered

    pg = await asyncpg.connect(db_url)
    try:
        for sql, args in statements:
            await pg.execute(numbered(sql), *args)
    finally:
        await pg.close()


async def test_migration_cleans_stored_rows(db_url: str) -> None:
    sqlite = db_url.startswith("sqlite:///")
    # PostgreSQL never held NUL (it refuses it); the other characters it did hold.
    nul = NUL if sqlite else ""
    store = await open_store(db_url)
    service = MemoryService(store)
    try:
        tea = (await service.remember(user_key=ALICE, text="The user likes green tea.")).id
        twin = (await service.remember(user_key=ALICE, text="The user likes black coffee.")).id
        dup = (await service.remember(user_key=ALICE, text="The user drinks espresso.")).id
        emoji = (await service.remember(user_key=BOB, text=f"The user is a {CODER}.")).id
        turn = await store.add_turn(turn=NewTurn(
            conversation_key="c", user_key=ALICE, role="user", text="x", origin="private",
            sent_at=SENT, author="Alice",
        ))  # fmt: skip
    finally:
        await store.close()
    number = 7 if sqlite else 6
    # What an old version stored: text (and norm) with control characters, index terms from
    # its words. Then the schema as it was before the migration.
    await write_raw(
        db_url,
        [
            (
                "UPDATE memories SET text = ?, norm = ? WHERE id = ?",
                (f"The user{nul} likes {ESC}green{CSI} tea{RLO}.", f"dirty{ESC}1", tea),
            ),
            (
                "UPDATE memories SET text = ?, norm = ? WHERE id = ?",
                (f"The user likes{ESC} black coffee{NEL}.", f"dirty{ESC}2", dup),
            ),
            ("UPDATE memories SET text = ? WHERE id = ?", (f"The user is a {CODER}.", emoji)),
            (
                "UPDATE turns SET text = ?, author = ? WHERE id = ?",
                (f"hi{nul}{ESC}\r\nthere\t{RLO}{FAMILY}", f"Al{BOM}ice", turn),
            ),
            ("DELETE FROM schema_migrations WHERE number = ?", (number,)),
        ],
    )
    store = await open_store(db_url, migrate=True)
    service = MemoryService(store)
    try:
        assert f"m00{number}_clean_text" in await store.applied_migrations()
        by_id = {m.id: m.text for m in await service.list_memories(user_key=ALICE)}
        # "black coffee." (NEL became a space, then collapsed) found its clean twin: the
        # dirty row is superseded by it, so one active memory per text holds.
        assert by_id == {tea: "The user likes green tea.", twin: "The user likes black coffee."}
        events = [(e.memory_id, e.event) for e in await service.history(user_key=ALICE)]
        assert (dup, "superseded") in events
        assert [m.text for m in await service.list_memories(user_key=BOB)] == [
            f"The user is a {CODER}."
        ]
        hits = await service.search(user_key=ALICE, query="green tea")
        assert [h.memory.id for h in hits][:1] == [tea]
        stats = await service.stats(user_key=ALICE)
        assert stats.total == 2
        turns = await store.recent_turns(conversation_key="c", limit=5)
        assert [(t.text, t.author) for t in turns] == [(f"hi\nthere\t{FAMILY}", "Alice")]
        # The index stays consistent: the cleaned memory can be forgotten and re-learned.
        await service.forget(user_key=ALICE, memory_id=tea)
        again = await service.remember(user_key=ALICE, text="The user likes green tea.")
        assert again.status == "added"
    finally:
        await store.close()
    if sqlite:
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            for shard in range(FTS_SHARDS):
                fts = f"memories_fts_{shard}"
                conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')")
            rows = conn.execute("SELECT text FROM memories").fetchall()
            for (text,) in rows:
                assert_clean(text)
            totals = conn.execute(
                "SELECT u.n_docs, u.total_len, count(m.id), COALESCE(sum(m.n_terms), 0)"
                " FROM users u LEFT JOIN memories m ON m.uid = u.uid"
                " AND m.superseded_by IS NULL GROUP BY u.uid"
            ).fetchall()
            assert all(r[0] == r[2] and r[1] == r[3] for r in totals), totals
        finally:
            conn.close()


async def test_migration_of_a_clean_store_changes_nothing(db_url: str) -> None:
    store = await open_store(db_url)
    try:
        service = MemoryService(store)
        await service.remember(user_key=ALICE, text=f"The user writes {PERSIAN} with {CODER}.")
        before = [(m.id, m.text, m.updated_at) for m in await service.list_memories(user_key=ALICE)]
    finally:
        await store.close()
    number = 7 if db_url.startswith("sqlite:///") else 6
    await write_raw(db_url, [("DELETE FROM schema_migrations WHERE number = ?", (number,))])
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


# ---------------------------------------------------------------- db copy
async def test_db_copy_of_rows_with_nul(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = await SQLiteStore.open(str(path))
    try:
        service = MemoryService(store)
        mid = (await service.remember(user_key=ALICE, text="The user likes green tea.")).id
        turn = await store.add_turn(turn=NewTurn(
            conversation_key="c", user_key=ALICE, role="user", text="x", origin="private",
            sent_at=SENT,
        ))  # fmt: skip
    finally:
        await store.close()
    # Written after every migration ran (as a version without the checks would have).
    await write_raw(
        f"sqlite:///{path}",
        [
            (
                "UPDATE memories SET text = ?, norm = ? WHERE id = ?",
                (f"The user{NUL} likes green{ESC} tea{RLO}.", f"the user{NUL} likes", mid),
            ),
            (
                "UPDATE turns SET text = ?, author = ? WHERE id = ?",
                (f"a{NUL}b\r\nc {CODER}", f"A{NUL}lice", turn),
            ),
        ],
    )
    with fresh_pg_database(migrated=False) as url:
        report = await copy_sqlite_to_postgres(f"sqlite:///{path}", url)
        assert report.ok, report.counts
        target: Store = await open_store(url)
        try:
            memories = await MemoryService(target).list_memories(user_key=ALICE)
            assert [(m.id, m.text) for m in memories] == [(mid, "The user likes green tea.")]
            hits = await target.search(user_key=ALICE, query="green tea", k=3)
            assert [h.memory.id for h in hits] == [mid]
            # Its normalised text is the clean one: the same sentence is a duplicate.
            again = await MemoryService(target).remember(
                user_key=ALICE, text="The user likes green tea."
            )
            assert (again.status, again.id) == ("duplicate", mid)
            turns = await target.recent_turns(conversation_key="c", limit=5)
            assert [(t.text, t.author) for t in turns] == [(f"ab\nc {CODER}", "Alice")]
        finally:
            await target.close()


async def test_queries_and_user_keys_with_controls(service: MemoryService) -> None:
    await service.remember(user_key=ALICE, text="The user likes green tea.")
    for query in (NUL, f"green{NUL}tea", f"{RLO}tea{ESC}", f"{ZWSP}{BOM}"):
        hits = await service.search(user_key=ALICE, query=query)
        assert all(h.memory.user_key == ALICE for h in hits)
    assert [h.memory.text for h in await service.search(user_key=ALICE, query=f"tea{NUL}")] == [
        "The user likes green tea."
    ]
    for key in (f"al{NUL}ice", f"slack:T1:U{RLO}1", f"{ZWSP}bob"):
        with pytest.raises(MemoryInputError, match="malformed user key"):
            parse_user_key(key)


def test_cleanup_and_reflection_sentences_are_cleaned() -> None:
    # core.memory.cleanup checks merged sentences with the same function as reflection.
    assert check_text(f"The user{NUL} likes {CODER}{RLO} tea.") == f"The user likes {CODER} tea."
    assert check_text(f"The user says {PERSIAN}.") == f"The user says {PERSIAN}."
    assert check_text(f"{NUL}{BOM}") is None
