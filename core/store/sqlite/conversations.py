"""The conversations part of the SQLite store (:class:`core.store.composed.ConversationPart`):
turns (history and the durable reflection queue), claimed platform events, memory modes,
one-time marks, usage, feedback and pending actions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from datetime import datetime
from typing import cast

from core.store.composed import Part
from core.store.rows import (
    TURN_COLUMNS,
    USAGE_TOTALS,
    place_column,
    turn_from_row,
    usage_filter,
    usage_row,
)
from core.store.seams import FeedbackRow
from core.store.sqlite.base import SQLiteBase, dt, ts
from core.store.sqlite.uses import record_recalls
from core.store.statements import USAGE_INSERT, StatementRules, reflection_end, usage_params
from core.store.writes import QUEUED_SQL, recovery_key, redacted
from core.types import (
    MemoryMode,
    NewTurn,
    ReflectionState,
    Turn,
    UsageRecord,
    UsageRow,
    usage_group_column,
    utcnow,
)


class SQLiteConversations(Part[SQLiteBase], StatementRules):
    """The conversations part of the SQLite store; its statement-only writes (a mode change,
    a reflection's state, pruning, usage, feedback, a pending action put or dropped) are
    :class:`core.store.statements.StatementRules` over the connection's ``_run_statements``."""

    def __init__(self, db: SQLiteBase) -> None:
        super().__init__(db)
        self._recovering: set[str] = set()
        """The recovery claims this process made (``claim_recovery``): its generation's."""

    def reflection_lock(self, *, user_key: str) -> AbstractAsyncContextManager[None]:
        """A no-op: one process owns the file, and its Reflector already runs one user's
        reflections one at a time."""
        return nullcontext()

    async def claim_recovery(self, *, turn_id: int) -> bool:
        """Claims tied to this process's generation (this store object): one process owns
        the file, so a recovery claim this object did not make was made by a process that is
        gone, and passes to this one. The row (``recover:{id}``) is written all the same, so
        a copy to PostgreSQL and the turn ids' sequence see it."""
        key = recovery_key(turn_id)
        if key in self._recovering:
            return False
        self._recovering.add(key)
        now = ts(utcnow())
        try:
            await self.db._run(
                lambda c: c.execute(
                    "INSERT INTO processed_events(event_key, claimed_at) VALUES (?, ?)"
                    " ON CONFLICT(event_key) DO UPDATE SET claimed_at = excluded.claimed_at",
                    (key, now),
                ),
                urgent=True,
            )
        except BaseException:
            self._recovering.discard(key)
            raise
        return True

    async def event_claimed_elsewhere(self, *, keys: Sequence[str]) -> bool:
        """Always False: one process owns the file, so a claim from before was made by a
        process that is gone."""
        return False

    async def add_turn(self, *, turn: NewTurn) -> int:
        # A user's message is stored before the platform's acknowledgement: urgent.
        return await self.db._run(lambda c: _insert_turn(c, turn), urgent=turn.role == "user")

    async def receive_turn(self, *, claim_keys: Sequence[str], turn: NewTurn) -> int | None:
        def receive(conn: sqlite3.Connection) -> int | None:
            if not _claim(conn, claim_keys):
                return None
            return _insert_turn(conn, turn)

        return await self.db._run(receive, urgent=True)  # before the acknowledgement

    async def finish_turn(
        self,
        *,
        turn_id: int,
        answer: str,
        answer_ref: str | None = None,
        reflect: bool = True,
        usage: Sequence[UsageRecord] = (),
        recalled: Sequence[int] = (),
    ) -> int | None:
        answer = redacted(answer) or answer
        dropped = False

        def finish(conn: sqlite3.Connection) -> int | None:
            nonlocal dropped
            for record in usage:
                _insert_usage(conn, record)
            row = conn.execute(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
            found = row.fetchone()
            if found is None:  # forgotten meanwhile
                return None
            turn = turn_from_row(found, time=dt)
            text = redacted(turn.text)
            if text is not None:  # answered: its secrets need not stay
                conn.execute("UPDATE turns SET text = ? WHERE id = ?", (text, turn_id))
            now = ts(utcnow())
            if recalled and turn.user_key is not None:
                dropped = not record_recalls(
                    conn, user_key=turn.user_key, memory_ids=recalled, at=now
                )
            answer_id = None
            if answer:
                cur = conn.execute(
                    "INSERT INTO turns(conversation_key, user_key, role, text, origin, sent_at,"
                    " created_at, reply_to, platform_ref, workspace)"
                    " VALUES (?, NULL, 'assistant', ?, ?, ?, ?, ?, ?, ?)",
                    (
                        turn.conversation_key,
                        answer,
                        turn.origin,
                        now,
                        now,
                        turn_id,
                        answer_ref,
                        turn.workspace,
                    ),
                )
                answer_id = cast(int, cur.lastrowid)
            conn.execute(
                "UPDATE turns SET reflection = ? WHERE id = ? AND reflection = 'answering'",
                ("pending" if reflect else "off", turn_id),
            )
            return answer_id

        answer_id = await self.db._run(finish)
        if dropped:  # committed without its recall record
            self.db.recall_records_dropped += 1
        return answer_id

    async def set_reply_ref(self, *, turn_id: int, reply_ref: str) -> None:
        def record(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE turns SET reply_ref = ? WHERE id = ?", (reply_ref, turn_id))

        await self.db._run(record, urgent=True)  # the answer's next write waits for it

    async def get_turn(self, *, turn_id: int) -> Turn | None:
        row = await self.db._fetchone(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return turn_from_row(row, time=dt) if row else None

    async def find_turn(self, *, conversation_key: str, platform_ref: str) -> Turn | None:
        row = await self.db._fetchone(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_key = ? AND platform_ref = ?"
            " AND role = 'user' ORDER BY id LIMIT 1",
            (conversation_key, platform_ref),
        )
        return turn_from_row(row, time=dt) if row else None

    async def answer_to(self, *, turn_id: int) -> Turn | None:
        row = await self.db._fetchone(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE reply_to = ? ORDER BY id LIMIT 1",
            (turn_id,),
        )
        return turn_from_row(row, time=dt) if row else None

    async def recent_turns(
        self, *, conversation_key: str, limit: int, before_id: int | None = None
    ) -> list[Turn]:
        if limit <= 0:
            return []
        rows = await self.db._fetchall(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_key = ? AND id < ?"
            " ORDER BY id DESC LIMIT ?",
            (conversation_key, before_id if before_id is not None else 2**62, limit),
        )
        return [turn_from_row(r, time=dt) for r in reversed(rows)]

    async def unanswered_turns(self, *, since: datetime, conversation_prefix: str) -> list[Turn]:
        prefix = conversation_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = await self.db._fetchall(
            f"SELECT {TURN_COLUMNS} FROM turns t WHERE t.role = 'user'"
            " AND t.reflection IS NOT NULL AND t.created_at >= ?"
            " AND t.conversation_key LIKE ? ESCAPE '\\'"
            " AND NOT EXISTS (SELECT 1 FROM turns a WHERE a.reply_to = t.id) ORDER BY t.id",
            (ts(since), prefix + "%"),
        )
        return [turn_from_row(r, time=dt) for r in rows]

    async def turns_to_reflect(self) -> list[Turn]:
        rows = await self.db._fetchall(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE reflection IN {QUEUED_SQL} ORDER BY id"
        )
        return [turn_from_row(r, time=dt) for r in rows]

    async def claim_event(self, *, keys: Sequence[str]) -> bool:
        if not keys:
            return True
        # Before the platform's acknowledgement: urgent.
        return await self.db._run(lambda c: _claim(c, keys), urgent=True)

    async def get_mode(self, *, user_key: str) -> MemoryMode:
        row = await self.db._fetchone(
            "SELECT mode FROM memory_modes WHERE user_key = ?", (user_key,)
        )
        return cast(MemoryMode, row[0]) if row else "on"

    async def mark_once(self, *, mark: str) -> bool:
        # Most marks are asked for again and again (a first-DM notice): read first, on the
        # read connection, and write only a new one.
        if await self.db._fetchone("SELECT 1 FROM marks WHERE mark = ?", (mark,)) is not None:
            return False

        def insert(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT OR IGNORE INTO marks(mark, at) VALUES (?, ?)", (mark, ts(utcnow()))
            )
            return cur.rowcount == 1

        return await self.db._run(insert)

    async def usage_report(
        self,
        *,
        since: datetime,
        by: str = "kind",
        user_key: str | None = None,
        workspace: str | None = None,
    ) -> list[UsageRow]:
        group = usage_group_column(by)
        where, params = usage_filter(ts(since), user_key, workspace)
        rows = await self.db._fetchall(
            f"SELECT {group}, {USAGE_TOTALS} FROM usage WHERE {where} GROUP BY 1 ORDER BY 1",
            params,
        )
        return [usage_row(r) for r in rows]

    async def chat_messages_since(
        self, *, since: datetime, user_key: str | None = None, workspace: str | None = None
    ) -> int:
        where, params = usage_filter(ts(since), user_key, workspace)
        row = await self.db._fetchone(
            f"SELECT COUNT(*) FROM usage WHERE {where} AND kind = 'chat'", params
        )
        return int(row[0]) if row else 0

    async def answered_message(
        self, *, user_key: str, platform_ref: str, conversation_prefix: str
    ) -> bool:
        prefix = conversation_prefix + ":"
        row = await self.db._fetchone(
            "SELECT 1 FROM turns u WHERE u.user_key = ? AND u.platform_ref = ?"
            " AND u.role = 'user' AND (u.conversation_key = ? OR substr(u.conversation_key,"
            " 1, ?) = ?) AND EXISTS (SELECT 1 FROM turns a WHERE a.reply_to = u.id) LIMIT 1",
            (user_key, platform_ref, conversation_prefix, len(prefix), prefix),
        )
        return row is not None

    async def feedback_report(self, *, since: datetime) -> list[FeedbackRow]:
        rows = await self.db._fetchall(
            "SELECT substr(at, 1, 10), workspace, SUM(positive), SUM(1 - positive)"
            " FROM feedback WHERE at >= ? GROUP BY 1, 2 ORDER BY 1, 2",
            [ts(since)],
        )
        return [FeedbackRow(str(r[0]), r[1], int(r[2]), int(r[3])) for r in rows]

    async def take_pending(
        self, *, token: str, user_key: str, kind: str, now: datetime
    ) -> str | None:
        found = await self.db._run(
            lambda c: c.execute(
                "DELETE FROM pending_actions WHERE token = ? AND user_key = ? AND kind = ?"
                " AND expires_at > ? RETURNING payload",
                (token, user_key, kind, ts(now)),
            ).fetchall()
        )
        return str(found[0][0]) if found else None

    async def pending_owner(self, *, token: str, kind: str, now: datetime) -> str | None:
        row = await self.db._fetchone(
            "SELECT user_key FROM pending_actions WHERE token = ? AND kind = ? AND expires_at > ?",
            (token, kind, ts(now)),
        )
        return str(row[0]) if row else None


def _insert_turn(conn: sqlite3.Connection, turn: NewTurn) -> int:
    cur = conn.execute(
        "INSERT INTO turns(conversation_key, user_key, role, author, text, origin,"
        " sent_at, created_at, reply_to, reflection, platform_ref, workspace, thread_ref, place)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            turn.conversation_key,
            turn.user_key,
            turn.role,
            turn.author,
            turn.text,
            turn.origin,
            ts(turn.sent_at),
            ts(utcnow()),
            turn.reply_to,
            turn.reflection,
            turn.platform_ref,
            turn.workspace,
            turn.thread_ref,
            place_column(turn.place),
        ),
    )
    return cast(int, cur.lastrowid)


def _claim(conn: sqlite3.Connection, keys: Sequence[str]) -> bool:
    """Claim an event by all its keys: False (nothing written) if any was claimed before."""
    if not keys:
        return True
    marks = ",".join("?" * len(keys))
    found = conn.execute(
        f"SELECT 1 FROM processed_events WHERE event_key IN ({marks}) LIMIT 1", tuple(keys)
    ).fetchone()
    if found is not None:
        return False
    now = ts(utcnow())
    conn.executemany(
        "INSERT OR IGNORE INTO processed_events(event_key, claimed_at) VALUES (?, ?)",
        [(k, now) for k in keys],
    )
    return True


def end_reflection(
    conn: sqlite3.Connection,
    turn_id: int,
    state: ReflectionState | None,
    attempts: int | None,
    usage: Sequence[UsageRecord],
) -> None:
    """Inside a write (on the connection's thread): record a reflection's ``usage`` and,
    unless ``state`` is None, the turn's reflection state (and ``attempts``, when given),
    only while the turn still waits for its reflection (``REFLECTING``): a turn turned
    ``off`` by a pause, or finished, stays as it is. With ``state`` None, ``attempts`` (when
    given) is only noted, never lowered: the usage of that attempt is in."""
    for record in usage:
        _insert_usage(conn, record)
    for sql, params in reflection_end(turn_id, state, attempts):
        conn.execute(sql, params)


def _insert_usage(conn: sqlite3.Connection, usage: UsageRecord) -> None:
    conn.execute(USAGE_INSERT, usage_params(usage, time=ts))
