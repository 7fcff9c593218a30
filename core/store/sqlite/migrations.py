"""The SQLite form of each schema migration, applied in order, each in one transaction.

The list that orders them, beside their PostgreSQL forms, is :data:`core.store.migrations.STEPS`;
this module holds only SQLite's SQL and the Python of the SQLite migrations that need it
(``m007_clean_text``). Never edit a released migration: add a step there.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import aiosqlite

from core.store.effects import Change, Execute, Fetch
from core.store.place_repair import count_shared, place_memories
from core.store.relabel import relabel_remembered
from core.store.secret_repair import redact_stored_secrets
from core.store.text_repair import clean_stored_text
from core.store.thread_repair import thread_places

M001_INITIAL = """
CREATE TABLE users (
    uid INTEGER PRIMARY KEY,
    user_key TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    n_docs INTEGER NOT NULL DEFAULT 0,     -- active memories: BM25's N for this user
    total_len INTEGER NOT NULL DEFAULT 0   -- sum of their index-term counts: BM25 avgdl * N
);

CREATE TABLE memories (
    id INTEGER PRIMARY KEY,
    uid INTEGER NOT NULL REFERENCES users(uid),
    text TEXT NOT NULL,
    norm TEXT NOT NULL,                   -- core.rules.text.normalize(text), for exact dedupe
    terms TEXT NOT NULL,                  -- index terms, u{uid}_{stem} ..., see core.rules.text
    n_terms INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('fact', 'preference', 'correction', 'context')),
    category TEXT NOT NULL
        CHECK (category IN ('communication', 'code', 'tools', 'workflow', 'general')),
    source TEXT NOT NULL CHECK (source IN ('reflection', 'remember', 'import')),
    origin TEXT NOT NULL CHECK (origin IN ('private', 'shared')),
    conversation_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    superseded_by INTEGER,
    superseded_at TEXT
);
CREATE INDEX memories_by_user ON memories(uid, id);
CREATE UNIQUE INDEX memories_active_norm ON memories(uid, norm) WHERE superseded_by IS NULL;

CREATE TABLE memory_events (
    id INTEGER PRIMARY KEY,
    uid INTEGER NOT NULL REFERENCES users(uid),
    memory_id INTEGER NOT NULL,
    event TEXT NOT NULL CHECK (event IN ('added', 'superseded', 'forgotten')),
    at TEXT NOT NULL,
    conversation_key TEXT,
    related_id INTEGER                    -- for 'superseded': the memory that replaced it
);
CREATE INDEX memory_events_by_user ON memory_events(uid, id);

-- Contentless FTS5 index over the prefixed terms of ACTIVE memories only, plus one marker
-- term per row for its origin (u{uid}__private / u{uid}__shared; no stem starts with "_").
-- Rows leave it by the 'delete' command with the same values. columnsize=0: no per-row
-- length table, so bm25() here ignores length (3x cheaper); lengths come from n_terms when
-- core.store.sqlite.store re-scores the candidates. bm25() weights: one column, 1.0.
CREATE VIRTUAL TABLE memories_fts USING fts5(
    terms, content='', columnsize=0, tokenize="unicode61 tokenchars '_'"
);
CREATE VIRTUAL TABLE memories_vocab USING fts5vocab(memories_fts, 'row');

CREATE TRIGGER memories_ai AFTER INSERT ON memories WHEN new.superseded_by IS NULL BEGIN
    INSERT INTO memories_fts(rowid, terms)
        VALUES (new.id, new.terms || ' u' || new.uid || '__' || new.origin);
    UPDATE users SET n_docs = n_docs + 1, total_len = total_len + new.n_terms
        WHERE uid = new.uid;
END;

CREATE TRIGGER memories_ad AFTER DELETE ON memories WHEN old.superseded_by IS NULL BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, terms)
        VALUES ('delete', old.id, old.terms || ' u' || old.uid || '__' || old.origin);
    UPDATE users SET n_docs = n_docs - 1, total_len = total_len - old.n_terms
        WHERE uid = old.uid;
END;

CREATE TRIGGER memories_superseded AFTER UPDATE OF superseded_by ON memories
WHEN old.superseded_by IS NULL AND new.superseded_by IS NOT NULL BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, terms)
        VALUES ('delete', old.id, old.terms || ' u' || old.uid || '__' || old.origin);
    UPDATE users SET n_docs = n_docs - 1, total_len = total_len - old.n_terms
        WHERE uid = old.uid;
END;

CREATE TRIGGER memories_restored AFTER UPDATE OF superseded_by ON memories
WHEN old.superseded_by IS NOT NULL AND new.superseded_by IS NULL BEGIN
    INSERT INTO memories_fts(rowid, terms)
        VALUES (new.id, new.terms || ' u' || new.uid || '__' || new.origin);
    UPDATE users SET n_docs = n_docs + 1, total_len = total_len + new.n_terms
        WHERE uid = new.uid;
END;

CREATE TRIGGER memories_reworded AFTER UPDATE OF terms ON memories
WHEN old.superseded_by IS NULL AND new.superseded_by IS NULL BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, terms)
        VALUES ('delete', old.id, old.terms || ' u' || old.uid || '__' || old.origin);
    INSERT INTO memories_fts(rowid, terms)
        VALUES (new.id, new.terms || ' u' || new.uid || '__' || new.origin);
    UPDATE users SET total_len = total_len - old.n_terms + new.n_terms WHERE uid = new.uid;
END;
"""

M002_CONVERSATIONS = """
-- Conversation turns: the history sent to Claude, and the durable queue of reflections.
CREATE TABLE turns (
    id INTEGER PRIMARY KEY,
    conversation_key TEXT NOT NULL,
    user_key TEXT,                        -- the speaker (NULL for the assistant)
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    author TEXT,                          -- display name, for attribution in shared threads
    text TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('private', 'shared')),
    sent_at TEXT NOT NULL,
    created_at TEXT NOT NULL,
    reply_to INTEGER,                     -- assistant turn: the user turn it answers
    -- user turns: answering -> pending -> done | skipped | off; NULL = context only
    reflection TEXT CHECK (reflection IN ('answering', 'pending', 'done', 'skipped', 'off')),
    attempts INTEGER NOT NULL DEFAULT 0,
    platform_ref TEXT                     -- the platform's message id (for notes, reactions)
);
CREATE INDEX turns_by_conversation ON turns(conversation_key, id);
CREATE INDEX turns_by_user ON turns(user_key);
CREATE INDEX turns_by_time ON turns(created_at);
CREATE INDEX turns_to_reflect ON turns(reflection, id)
    WHERE reflection IN ('answering', 'pending');

-- Platform events already handled (Slack event ids, channel+ts): exactly one answer each.
CREATE TABLE processed_events (
    event_key TEXT PRIMARY KEY,
    claimed_at TEXT NOT NULL
);
CREATE INDEX processed_events_by_time ON processed_events(claimed_at);

-- /memory pause | off (absent = on).
CREATE TABLE memory_modes (
    user_key TEXT PRIMARY KEY,
    mode TEXT NOT NULL CHECK (mode IN ('paused', 'off')),
    updated_at TEXT NOT NULL
);

-- One-time marks: "first DM notice shown to X", "thread T seeded from the platform".
CREATE TABLE marks (
    mark TEXT PRIMARY KEY,
    at TEXT NOT NULL
);
"""

M003_USAGE = """
-- The workspace (Slack team, Discord guild) a turn happened in, for usage and daily caps.
ALTER TABLE turns ADD COLUMN workspace TEXT;

-- One row per Claude call, as the API reported its usage.
CREATE TABLE usage (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    user_key TEXT NOT NULL,
    workspace TEXT,
    kind TEXT NOT NULL CHECK (kind IN ('chat', 'reflection', 'cleanup')),
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_input_tokens INTEGER NOT NULL,
    cache_creation_input_tokens INTEGER NOT NULL,
    turn_id INTEGER
);
CREATE INDEX usage_by_user ON usage(user_key, at);
CREATE INDEX usage_by_workspace ON usage(workspace, at);
CREATE INDEX usage_by_time ON usage(at);
"""

M004_CLEANUP = """
-- Memory hygiene: events carry the change (a cleanup run, a correction) they belong to, so a
-- change can be reviewed and undone; new event kinds 'retired' and 'restored'.
-- A retired memory is marked superseded by itself (it leaves recall, nothing replaces it).
CREATE TABLE memory_events_new (
    id INTEGER PRIMARY KEY,
    uid INTEGER NOT NULL REFERENCES users(uid),
    memory_id INTEGER NOT NULL,
    event TEXT NOT NULL
        CHECK (event IN ('added', 'superseded', 'forgotten', 'retired', 'restored')),
    at TEXT NOT NULL,
    conversation_key TEXT,
    related_id INTEGER,
    change_id TEXT
);
INSERT INTO memory_events_new(id, uid, memory_id, event, at, conversation_key, related_id)
    SELECT id, uid, memory_id, event, at, conversation_key, related_id FROM memory_events;
DROP TABLE memory_events;
ALTER TABLE memory_events_new RENAME TO memory_events;
CREATE INDEX memory_events_by_user ON memory_events(uid, id);
CREATE INDEX memory_events_by_change ON memory_events(change_id) WHERE change_id IS NOT NULL;
"""

M005_EMBEDDINGS = """
-- Optional semantic recall (SELFMIND_RECALL=hybrid): one float32 embedding per memory.
-- Superseded and retired memories keep theirs (recall reads active memories only, and an
-- undo makes them active again); a forgotten or deleted memory's embedding goes with it.
CREATE TABLE memory_embeddings (
    memory_id INTEGER PRIMARY KEY,
    uid INTEGER NOT NULL,
    model TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX memory_embeddings_by_user ON memory_embeddings(uid);
CREATE TRIGGER memories_ad_embedding AFTER DELETE ON memories BEGIN
    DELETE FROM memory_embeddings WHERE memory_id = old.id;
END;
"""

FTS_SHARDS = 32
"""How many FTS5 indexes the memories are spread over (m006): user ``uid`` lives in
``memories_fts_{uid % FTS_SHARDS}``. Fixed by the migration; changing it needs a new one."""


def fts_table(uid: int) -> str:
    """The FTS5 table holding user ``uid``'s index terms (``memories_vocab_N`` is its vocab)."""
    return f"memories_fts_{uid % FTS_SHARDS}"


def _m006_sharded_fts() -> str:
    # Why shards. FTS5 (3.40, no 'secure-delete' option) removes a row by writing a delete
    # marker; the row's terms stay in the segment that holds them until a merge rewrites it.
    # Erasing therefore means rewriting the segments ('optimize'), which costs the size of
    # the index: about 1.2 us per memory, 1.2 s for one index of 1,000,000 memories, during
    # which the write lock is held. Spread over 32 indexes by user, a forget rewrites only
    # its user's index: 1/32 of the other users' memories (bench/forget.py). Why not more:
    # each index costs every insert and delete one trigger check (about 0.45 us a row), so
    # 64 shards made a 50,000-memory forget-all 1.4 s slower than 1 index did.
    parts = [
        "DROP TRIGGER memories_ai;",
        "DROP TRIGGER memories_ad;",
        "DROP TRIGGER memories_superseded;",
        "DROP TRIGGER memories_restored;",
        "DROP TRIGGER memories_reworded;",
        "DROP TABLE memories_vocab;",
        "DROP TABLE memories_fts;",
        # forget: "events that pointed at this memory" by index, not by scanning the user's.
        "CREATE INDEX memory_events_by_related ON memory_events(uid, related_id)"
        " WHERE related_id IS NOT NULL;",
    ]
    row = "' u' || {r}.uid || '__' || {r}.origin"
    for n in range(FTS_SHARDS):
        fts = f"memories_fts_{n}"
        new_row = f"new.terms || {row.format(r='new')}"
        old_row = f"old.terms || {row.format(r='old')}"
        on = f"new.uid % {FTS_SHARDS} = {n}"
        on_old = f"old.uid % {FTS_SHARDS} = {n}"
        parts += [
            f"CREATE VIRTUAL TABLE {fts} USING fts5("
            " terms, content='', columnsize=0, tokenize=\"unicode61 tokenchars '_'\");",
            f"CREATE VIRTUAL TABLE memories_vocab_{n} USING fts5vocab({fts}, 'row');",
            f"INSERT INTO {fts}(rowid, terms) SELECT id, terms || ' u' || uid || '__' || origin"
            f" FROM memories WHERE superseded_by IS NULL AND uid % {FTS_SHARDS} = {n};",
            f"CREATE TRIGGER memories_ai_{n} AFTER INSERT ON memories"
            f" WHEN new.superseded_by IS NULL AND {on} BEGIN\n"
            f"    INSERT INTO {fts}(rowid, terms) VALUES (new.id, {new_row});\nEND;",
            f"CREATE TRIGGER memories_ad_{n} AFTER DELETE ON memories"
            f" WHEN old.superseded_by IS NULL AND {on_old} BEGIN\n"
            f"    INSERT INTO {fts}({fts}, rowid, terms) VALUES ('delete', old.id, {old_row});"
            "\nEND;",
            f"CREATE TRIGGER memories_superseded_{n} AFTER UPDATE OF superseded_by ON memories"
            f" WHEN old.superseded_by IS NULL AND new.superseded_by IS NOT NULL AND {on} BEGIN\n"
            f"    INSERT INTO {fts}({fts}, rowid, terms) VALUES ('delete', old.id, {old_row});"
            "\nEND;",
            f"CREATE TRIGGER memories_restored_{n} AFTER UPDATE OF superseded_by ON memories"
            f" WHEN old.superseded_by IS NOT NULL AND new.superseded_by IS NULL AND {on} BEGIN\n"
            f"    INSERT INTO {fts}(rowid, terms) VALUES (new.id, {new_row});\nEND;",
            f"CREATE TRIGGER memories_reworded_{n} AFTER UPDATE OF terms ON memories"
            f" WHEN old.superseded_by IS NULL AND new.superseded_by IS NULL AND {on} BEGIN\n"
            f"    INSERT INTO {fts}({fts}, rowid, terms) VALUES ('delete', old.id, {old_row});\n"
            f"    INSERT INTO {fts}(rowid, terms) VALUES (new.id, {new_row});\nEND;",
        ]
    # The per-user counts, once per row (not once per shard).
    parts += [
        "CREATE TRIGGER memories_ai AFTER INSERT ON memories WHEN new.superseded_by IS NULL"
        " BEGIN\n    UPDATE users SET n_docs = n_docs + 1, total_len = total_len + new.n_terms"
        " WHERE uid = new.uid;\nEND;",
        "CREATE TRIGGER memories_ad AFTER DELETE ON memories WHEN old.superseded_by IS NULL"
        " BEGIN\n    UPDATE users SET n_docs = n_docs - 1, total_len = total_len - old.n_terms"
        " WHERE uid = old.uid;\nEND;",
        "CREATE TRIGGER memories_superseded AFTER UPDATE OF superseded_by ON memories"
        " WHEN old.superseded_by IS NULL AND new.superseded_by IS NOT NULL BEGIN\n"
        "    UPDATE users SET n_docs = n_docs - 1, total_len = total_len - old.n_terms"
        " WHERE uid = old.uid;\nEND;",
        "CREATE TRIGGER memories_restored AFTER UPDATE OF superseded_by ON memories"
        " WHEN old.superseded_by IS NOT NULL AND new.superseded_by IS NULL BEGIN\n"
        "    UPDATE users SET n_docs = n_docs + 1, total_len = total_len + new.n_terms"
        " WHERE uid = new.uid;\nEND;",
        "CREATE TRIGGER memories_reworded AFTER UPDATE OF terms ON memories"
        " WHEN old.superseded_by IS NULL AND new.superseded_by IS NULL BEGIN\n"
        "    UPDATE users SET total_len = total_len - old.n_terms + new.n_terms"
        " WHERE uid = new.uid;\nEND;",
    ]
    return "\n".join(parts)


M006_SHARDED_FTS = _m006_sharded_fts()


def _io(conn: aiosqlite.Connection) -> tuple[Fetch, Execute]:
    """``conn`` as the ``fetch`` and ``execute`` (``?`` placeholders) that the shared repairs
    (:mod:`core.store.text_repair`, ``secret_repair``, ``relabel``, ``place_repair``) take."""

    async def fetch(sql: str, args: Sequence[Any]) -> Sequence[Sequence[Any]]:
        return list(await conn.execute_fetchall(sql, args))

    async def execute(sql: str, args: Sequence[Any]) -> None:
        await conn.execute(sql, args)

    return fetch, execute


async def m007_clean_text(conn: aiosqlite.Connection) -> Change:
    """Clean memories and turns stored before text hygiene (:mod:`core.store.text_repair`): NUL,
    control characters, bidirectional overrides, zero-width spaces, BOMs."""

    fetch, execute = _io(conn)

    now = datetime.now(UTC).isoformat(timespec="microseconds")
    return await clean_stored_text(fetch=fetch, execute=execute, now=now)


M008_PENDING_ACTIONS = """
-- What a chat button refers to, shared by every process on the database: a pending cleanup
-- plan (payload: its operations as JSON) or a single-use confirmation (forget all, undo).
-- A row is taken (deleted) by the one click that acts on it; expired rows are purged.
CREATE TABLE pending_actions (
    token TEXT PRIMARY KEY,
    user_key TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX pending_actions_by_user ON pending_actions(user_key, kind);
CREATE INDEX pending_actions_by_expiry ON pending_actions(expires_at);
"""

M009_FEEDBACK = """
-- Thumbs up / down on an answer: one row per answer and user; a second click replaces it.
CREATE TABLE feedback (
    answer_ref TEXT NOT NULL,  -- the answered message, e.g. slack:{team}:{channel}:{ts}
    user_key TEXT NOT NULL,
    workspace TEXT,
    positive INTEGER NOT NULL CHECK (positive IN (0, 1)),
    at TEXT NOT NULL,
    PRIMARY KEY (answer_ref, user_key)
);
CREATE INDEX feedback_by_time ON feedback(at);
"""

M010_REPLY_REF = """
-- The platform message(s) an answer in progress shows, recorded on the user's turn as soon
-- as the platform names them (Slack: a stream's ts from chat.startStream, which takes no
-- metadata), so that the start-up recovery finds and replaces them after a crash.
ALTER TABLE turns ADD COLUMN reply_ref TEXT;
"""


_PRIMARY_KEY = re.compile(r"\bid\s+INTEGER\s+PRIMARY\s+KEY\b(?!\s+AUTOINCREMENT)", re.IGNORECASE)


async def m011_ids_never_reused(conn: aiosqlite.Connection) -> None:
    """Give ``memories.id`` AUTOINCREMENT, so a forgotten memory's id is never handed to a
    new one (a plain ``INTEGER PRIMARY KEY`` reuses the largest freed rowid, and a Forget
    button of the old memory then named the new one; https://www.sqlite.org/autoinc.html).
    The table is rebuilt by :func:`_autoincrement`; FTS5 shards (keyed by rowid),
    embeddings, history and cleanup events still point at the right memories, and no
    trigger fires during the copy, so the per-user BM25 counts stay as they are. The
    sequence starts after the largest id the store has ever named: live rows, history
    (``memory_events``: every memory ever written has its ``added`` event, forgotten ones
    their ``forgotten`` one), embeddings, and the ids a pending cleanup plan shows."""
    await _autoincrement(
        conn,
        "memories",
        largest="SELECT MAX(id) FROM (SELECT MAX(id) AS id FROM memories"
        " UNION ALL SELECT MAX(memory_id) FROM memory_events"
        " UNION ALL SELECT MAX(related_id) FROM memory_events"
        " UNION ALL SELECT MAX(memory_id) FROM memory_embeddings"
        " UNION ALL SELECT MAX(CAST(t.key AS INTEGER)) FROM pending_actions p,"
        "  json_each(CASE WHEN json_valid(p.payload) THEN p.payload END, '$.texts') t"
        "  WHERE p.kind = 'cleanup_plan')",
    )


async def _autoincrement(conn: aiosqlite.Connection, table: str, *, largest: str) -> None:
    """Rebuild ``table`` with ``id INTEGER PRIMARY KEY AUTOINCREMENT`` (:func:`_rebuild`)
    and start its sequence after ``largest`` (SQL of one value: the largest id the store
    ever named)."""

    def add_autoincrement(ddl: str) -> str:
        if _PRIMARY_KEY.search(ddl) is None:
            raise sqlite3.OperationalError(
                f"{table} has no plain 'id INTEGER PRIMARY KEY' to change"
            )
        return _PRIMARY_KEY.sub("id INTEGER PRIMARY KEY AUTOINCREMENT", ddl, count=1)

    # Largest before the copy: the query may read the table itself.
    rows = list(await conn.execute_fetchall(largest))
    start = int((rows[0][0] if rows else None) or 0)
    await _rebuild(conn, table, add_autoincrement)
    await conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (table,))
    await conn.execute("INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)", (table, start))


async def _rebuild(conn: aiosqlite.Connection, table: str, change: Callable[[str], str]) -> None:
    """Rebuild ``table`` from its own stored definition as ``change`` (its ``CREATE TABLE``
    SQL -> the new one; raises ``sqlite3.OperationalError`` when it finds nothing to
    change) makes it: what SQLite cannot alter in place (AUTOINCREMENT, a CHECK).

    The documented procedure (https://www.sqlite.org/lang_altertable.html#otheralter):
    columns added by earlier migrations stay; rows keep their ids; no trigger fires during
    the copy (they are on the old table); the indexes and triggers are recreated from
    their stored SQL."""
    rows = list(
        await conn.execute_fetchall(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        )
    )
    if not rows:
        raise sqlite3.OperationalError(f"no table {table} to rebuild")
    ddl = change(str(rows[0][0]))
    ddl = re.sub(rf"^CREATE TABLE\s+\"?{table}\"?", f"CREATE TABLE {table}_new", ddl, count=1)
    others = list(
        await conn.execute_fetchall(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ?"
            " AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name",
            (table,),
        )
    )
    await conn.execute(ddl)
    await conn.execute(f"INSERT INTO {table}_new SELECT * FROM {table}")
    await conn.execute(f"DROP TABLE {table}")  # its indexes and triggers with it
    await conn.execute(f"ALTER TABLE {table}_new RENAME TO {table}")
    for (sql,) in others:
        await conn.execute(sql)


logger = logging.getLogger(__name__)


M012_STANDING_INDEX = """
-- The standing profile (core.memory.profile) reads a user's active memories of every kind but
-- plain general facts, newest first: this partial index answers it without a scan.
CREATE INDEX memories_standing ON memories(uid, id)
    WHERE superseded_by IS NULL AND (kind <> 'fact' OR category <> 'general');
"""


async def m012_label_remembered(conn: aiosqlite.Connection) -> Change:
    """The standing profile's index, and kind and category for memories that ``/remember``
    and import stored as ``fact``/``general`` (:mod:`core.store.relabel`)."""

    fetch, execute = _io(conn)

    await conn.execute(M012_STANDING_INDEX)
    changed = await relabel_remembered(fetch=fetch, execute=execute)
    logger.info("m012: labelled %d remembered memories", changed.memories)
    return changed


M013_THREAD_REF = """
-- The thread a message was said in when its conversation key does not name it (a Slack DM
-- thread's thread_ts), so that an answer a crash cut is recovered into that thread.
ALTER TABLE turns ADD COLUMN thread_ref TEXT;
"""


async def m014_redact_secrets(conn: aiosqlite.Connection) -> Change:
    """Erase memories and redact turns stored with a secret before the secret check
    (:mod:`core.store.secret_repair`); the erased users' FTS5 indexes are rewritten, so the
    secret's index terms leave the file as a forget's do."""

    fetch, execute = _io(conn)

    async def erased(uids: set[int]) -> None:
        for fts in sorted({fts_table(uid) for uid in uids}):
            await conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")

    now = datetime.now(UTC).isoformat(timespec="microseconds")
    return await redact_stored_secrets(fetch=fetch, execute=execute, now=now, erased=erased)


M015_MEMORY_USES = """
-- How each memory was used (core.store.seams.RecallLog): recalls (delivered answers whose
-- prompt carried it, profile or recall) and when last; confirmations (writes deduplicated
-- against it: the standing profile's tie-break). Recorded from this migration on (the
-- audit's "not recalled" waits for it). Its own table keyed by memory id: a turn's one
-- upsert touches neither
-- the memories row nor the FTS5 shards. Erased with the memory (trigger).
CREATE TABLE memory_uses (
    memory_id INTEGER PRIMARY KEY,
    uid INTEGER NOT NULL,
    recalls INTEGER NOT NULL DEFAULT 0,
    last_recalled_at TEXT,
    confirmations INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX memory_uses_by_user ON memory_uses(uid);
CREATE TRIGGER memories_ad_uses AFTER DELETE ON memories BEGIN
    DELETE FROM memory_uses WHERE memory_id = old.id;
END;
"""


async def m016_turn_ids_never_reused(conn: aiosqlite.Connection) -> None:
    """Give ``turns.id`` AUTOINCREMENT (as m011 gave ``memories.id``): a plain ``INTEGER
    PRIMARY KEY`` hands the largest freed rowid to the next turn, and a turn deleted at the
    top (``/forget all`` of the user who spoke last) is still named elsewhere: by an answer
    in flight (``finish_turn`` would store one user's answer on another user's message), the
    reflection queued for it, its recovery claim (``recover:{id}``, which would keep a
    crashed new turn from being recovered) and its usage rows. The sequence starts after the
    largest turn id any of those name."""
    await _autoincrement(
        conn,
        "turns",
        largest="SELECT MAX(id) FROM (SELECT MAX(id) AS id FROM turns"
        " UNION ALL SELECT MAX(reply_to) FROM turns"
        " UNION ALL SELECT MAX(turn_id) FROM usage"
        " UNION ALL SELECT MAX(CAST(substr(event_key, 9) AS INTEGER)) FROM processed_events"
        "  WHERE event_key LIKE 'recover:%')",
    )


M022_MEMORY_ABOUT_DATES = """
-- Whose fact a memory is and the days it holds (core.rules.about, core.rules.when):
-- about NULL is the user, else the other person as the text names them ("the user's
-- manager", "Sarah"); valid_from / valid_until ISO days (YYYY-MM-DD), NULL: no bound.
-- Existing memories stay about the user with no dates (nothing is guessed).
ALTER TABLE memories ADD COLUMN about TEXT;
ALTER TABLE memories ADD COLUMN valid_from TEXT;
ALTER TABLE memories ADD COLUMN valid_until TEXT;
"""


async def m020_redact_secret_forms(conn: aiosqlite.Connection) -> Change:
    """m014 again with the secret check of issue 36 (:mod:`core.rules.secrets`): memories
    and messages stored before it learned card numbers (Luhn), card codes, IBANs, US SSNs,
    2FA backup codes and TOTP seeds, passwords without a colon, URL credentials without a
    user name and Slack tokens split by spaces. Counts logged, never text."""
    return await m014_redact_secrets(conn)


async def m017_places(conn: aiosqlite.Connection) -> Change:
    """Where each memory was learned and so where it may be used (issue 35,
    :mod:`core.rules.places`): ``memories.place`` (NULL: the owner's DM) and
    ``memories.reach`` (the rule's token, default ``dm``), ``turns.place`` (where a message
    was said; NULL for older turns); every existing memory gets its place from the turn it
    was learned in (:mod:`core.store.place_repair`). The FTS5 marker term of each memory
    becomes ``u{uid}__{reach}`` (it was its origin), so recall keeps the rule inside the
    index query: the shard triggers are rewritten and each shard is filled again."""
    await conn.execute("ALTER TABLE memories ADD COLUMN place TEXT")
    await conn.execute("ALTER TABLE memories ADD COLUMN reach TEXT NOT NULL DEFAULT 'dm'")
    await conn.execute("ALTER TABLE turns ADD COLUMN place TEXT")

    fetch, execute = _io(conn)

    before = await count_shared(fetch)
    placed = await place_memories(fetch=fetch, execute=execute)
    logger.info("m017: %d memories learned in a shared place got that place", placed)
    triggers = list(
        await conn.execute_fetchall(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'memories'"
            " AND sql LIKE '%memories_fts_%'"
        )
    )
    for name, sql in triggers:
        await conn.execute(f"DROP TRIGGER {name}")
        await conn.execute(
            str(sql)
            .replace("'__' || new.origin", "'__' || new.reach")
            .replace("'__' || old.origin", "'__' || old.reach")
        )
    for n in range(FTS_SHARDS):
        fts = f"memories_fts_{n}"
        await conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('delete-all')")
        await conn.execute(
            f"INSERT INTO {fts}(rowid, terms) SELECT id, terms || ' u' || uid || '__' || reach"
            f" FROM memories WHERE superseded_by IS NULL AND uid % {FTS_SHARDS} = {n}"
        )
    return before


M018_CHANNEL_MEMORY = """
-- A channel's own memory (team memory, core.memory.team): its entries are memories owned
-- by the channel key (slack:T1:C1, discord:GUILD:CHANNEL), so recall, dedupe, forget,
-- export, undo and db copy are the memories'; these tables add the channel's settings
-- and who said each entry (a turn's channel is its place, m017/m014).
CREATE TABLE channels (
    channel_key TEXT PRIMARY KEY,
    platform TEXT NOT NULL,
    workspace TEXT,
    channel TEXT NOT NULL,
    kind TEXT NOT NULL,                      -- as last seen: private_channel | public_channel
    memory_on INTEGER NOT NULL DEFAULT 0,    -- off by default
    memory_kind TEXT,                        -- the kind it was turned on (reviewed) under
    changed_by TEXT,                         -- the user key who turned it on or off last
    changed_at TEXT,
    allowed TEXT NOT NULL DEFAULT '',        -- user keys who may turn it on or off, spaced
    version INTEGER NOT NULL DEFAULT 0,      -- bumped by every change of its entries' attribution
    seen_at TEXT NOT NULL
);
CREATE TABLE channel_entries (
    memory_id INTEGER PRIMARY KEY,
    channel_key TEXT NOT NULL,
    said_by TEXT,                            -- NULL once that person forgot everything
    said_by_name TEXT,
    said_at TEXT NOT NULL,
    link TEXT,
    changed_by TEXT
);
CREATE INDEX channel_entries_by_speaker ON channel_entries(said_by) WHERE said_by IS NOT NULL;
CREATE INDEX channel_entries_by_channel ON channel_entries(channel_key);
CREATE TRIGGER memories_ad_channel AFTER DELETE ON memories BEGIN
    DELETE FROM channel_entries WHERE memory_id = old.id;
END;
"""


_USAGE_KINDS = re.compile(r"CHECK \(kind IN \('chat', 'reflection', 'cleanup'\)\)")


async def m023_usage_kind_consolidation(conn: aiosqlite.Connection) -> None:
    """Nightly consolidation's Claude calls get their own usage kind (they were
    ``cleanup``), so the usage report shows them on their own line. SQLite cannot change a
    CHECK in place: the usage table is rebuilt (:func:`_rebuild`) with the same columns,
    rows and ids, its CHECK allowing ``consolidation`` too."""

    def widen(ddl: str) -> str:
        if _USAGE_KINDS.search(ddl) is None:
            raise sqlite3.OperationalError("usage has no kind CHECK to widen")
        return _USAGE_KINDS.sub(
            "CHECK (kind IN ('chat', 'reflection', 'cleanup', 'consolidation'))", ddl, count=1
        )

    await _rebuild(conn, "usage", widen)


async def m026_thread_places(conn: aiosqlite.Connection) -> Change:
    """What was learned in a thread of a Discord private channel becomes the thread's own
    (:mod:`core.store.thread_repair`)."""
    return await thread_places(*_io(conn))
