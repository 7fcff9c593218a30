"""The conversations part of the PostgreSQL store
(:class:`core.store.composed.ConversationPart`): turns (history and the durable reflection
queue), claimed platform events, memory modes, one-time marks, usage, feedback and pending
actions.

Reflections across replicas. A user turn is claimed (``turns.claimed_by``) by the replica
that stored it. :meth:`PostgresConversations.turns_to_reflect` returns, and claims in one
statement, only the turns waiting for a reflection whose replica is gone: unclaimed turns
(e.g. copied from SQLite) and those of replicas no longer holding their liveness lock
(:mod:`core.store.postgres.base`). The Reflector calls it at start-up and every
``sweep_interval_s``; a live replica's turns, even those it is still answering, are never
taken from it, and ``FOR UPDATE SKIP LOCKED`` gives each orphan to one replica only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, cast

import asyncpg

from core.store.composed import Part
from core.store.postgres.base import LOCK_REFLECTION, LOCK_REPLICA, PostgresBase, user_lock_key
from core.store.postgres.migrations import numbered
from core.store.postgres.uses import RECALLED
from core.store.rows import (
    TURN_COLUMNS,
    USAGE_TOTALS,
    place_column,
    turn_from_row,
    usage_filter,
    usage_row,
)
from core.store.seams import FeedbackRow
from core.store.statements import USAGE_INSERT, StatementRules, reflection_end, usage_params
from core.store.writes import (
    QUEUED_SQL,
    recovery_key,
    redacted,
    still_reflecting,
)
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

logger = logging.getLogger(__name__)

_USAGE_INSERT = numbered(USAGE_INSERT)


def _as_is(at: datetime) -> datetime:
    return at


# Replicas alive now: those holding their liveness lock in this database ($1 = LOCK_REPLICA).
_LIVE_REPLICAS = (
    "SELECT objid::bigint AS replica FROM pg_locks WHERE locktype = 'advisory'"
    " AND classid = $1::bigint::oid AND objsubid = 2 AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


class _Unclaimed(Exception):
    """Rolls back a claim that found an event key claimed before."""


class _RecallNotRecorded(Exception):
    """Rolls back a turn's end whose recall record failed (it is run again without it)."""


class PostgresConversations(Part[PostgresBase], StatementRules):
    """The conversations part of the PostgreSQL store; its statement-only writes (a mode
    change, a reflection's state, pruning, usage, feedback, a pending action put or dropped)
    are :class:`core.store.statements.StatementRules` over the connection's
    ``_run_statements``."""

    @asynccontextmanager
    async def reflection_lock(self, *, user_key: str) -> AsyncIterator[None]:
        """Held around each reflection of ``user_key``: no other reflection of that user runs
        meanwhile, in this process or any replica (a session advisory lock, released if this
        process dies). Waits, polling, while another replica holds it."""
        key = user_lock_key(user_key)
        async with self.db._user_locks.hold(user_key):
            delay = 0.02
            while not await self.db._session_value(
                "SELECT pg_try_advisory_lock($1, $2)", LOCK_REFLECTION, key
            ):
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
            try:
                yield
            finally:
                await self.db._session_value(
                    "SELECT pg_advisory_unlock($1, $2)", LOCK_REFLECTION, key, quiet=True
                )

    async def add_turn(self, *, turn: NewTurn) -> int:
        if turn.role == "user":  # before the platform's acknowledgement
            async with self.db._intake_tx() as conn:
                return await self._insert_turn(conn, turn)
        async with self.db._tx() as conn:
            return await self._insert_turn(conn, turn)

    async def receive_turn(self, *, claim_keys: Sequence[str], turn: NewTurn) -> int | None:
        """One statement (one round trip, atomic on its own): the claim of every key and the
        user's message, inserted only when no key was claimed before. Two replicas claiming
        one event at once: the primary key lets one insert each key; the other's turn is not
        stored (it may keep a claim on a key of its own of that event, which names the same
        duplicate)."""
        with self.db._errors():
            async with self.db._intake.acquire() as conn:
                turn_id = await conn.fetchval(
                    "WITH seen AS (SELECT 1 FROM processed_events WHERE event_key = ANY($1)"
                    " LIMIT 1), claimed AS (INSERT INTO processed_events(event_key, claimed_at,"
                    " claimed_by) SELECT k, $9, $18 FROM unnest($1::text[]) WITH ORDINALITY"
                    " AS e(k, n) WHERE NOT EXISTS (SELECT 1 FROM seen) ORDER BY n"
                    f" ON CONFLICT DO NOTHING RETURNING 1) INSERT INTO turns({_TURN_INSERT})"
                    " SELECT $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,"
                    " $17"
                    " WHERE (SELECT count(*) FROM claimed) = cardinality($1::text[])"
                    " RETURNING id",
                    sorted(set(claim_keys)),
                    *self._turn_row(turn),
                    self.db.replica_id,
                )
        return None if turn_id is None else int(turn_id)

    async def _insert_turn(self, conn: asyncpg.Connection, turn: NewTurn) -> int:
        return int(
            await conn.fetchval(
                f"INSERT INTO turns({_TURN_INSERT})"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,"
                " $16)"
                " RETURNING id",
                *self._turn_row(turn),
            )
        )

    def _turn_row(self, turn: NewTurn) -> tuple[Any, ...]:
        """The values of ``_TURN_INSERT`` for ``turn``: a turn waiting for its answer or
        reflection is claimed by this replica."""
        waiting = still_reflecting(turn.reflection)
        now = utcnow()
        return (
            turn.conversation_key,
            turn.user_key,
            turn.role,
            turn.author,
            turn.text,
            turn.origin,
            turn.sent_at,
            now,
            turn.reply_to,
            turn.reflection,
            turn.platform_ref,
            turn.workspace,
            turn.thread_ref,
            self.db.replica_id if waiting else None,
            now if waiting else None,
            place_column(turn.place),
        )

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
        try:
            return await self._finish_turn(turn_id, answer, answer_ref, reflect, usage, recalled)
        except _RecallNotRecorded:  # rolled back: the same step again, without the record
            self.db.recall_records_dropped += 1
            return await self._finish_turn(turn_id, answer, answer_ref, reflect, usage, ())

    async def _finish_turn(
        self,
        turn_id: int,
        answer: str,
        answer_ref: str | None,
        reflect: bool,
        usage: Sequence[UsageRecord],
        recalled: Sequence[int],
    ) -> int | None:
        async with self.db._tx() as conn:
            await _insert_usage(conn, usage)
            row = await conn.fetchrow(
                f"SELECT {TURN_COLUMNS} FROM turns WHERE id = $1 FOR UPDATE", turn_id
            )
            if row is None:  # forgotten meanwhile
                return None
            turn = turn_from_row(row)
            text = redacted(turn.text)
            if text is not None:  # answered: its secrets need not stay
                await conn.execute("UPDATE turns SET text = $1 WHERE id = $2", text, turn_id)
            now = utcnow()
            if recalled and turn.user_key is not None:
                # No savepoint (two more round trips each turn): a failure aborts the
                # transaction, which is then run again without the record.
                try:
                    await conn.execute(RECALLED, now, turn.user_key, sorted(set(recalled)))
                except asyncpg.PostgresError as exc:
                    logger.warning("recall record dropped: %s", type(exc).__name__)
                    raise _RecallNotRecorded from exc
            answer_id = None
            if answer:
                answer_id = int(
                    await conn.fetchval(
                        "INSERT INTO turns(conversation_key, user_key, role, text, origin,"
                        " sent_at, created_at, reply_to, platform_ref, workspace)"
                        " VALUES ($1, NULL, 'assistant', $2, $3, $4, $4, $5, $6, $7)"
                        " RETURNING id",
                        turn.conversation_key,
                        answer,
                        turn.origin,
                        now,
                        turn_id,
                        answer_ref,
                        turn.workspace,
                    )
                )
            await conn.execute(
                "UPDATE turns SET reflection = $1 WHERE id = $2 AND reflection = 'answering'",
                "pending" if reflect else "off",
                turn_id,
            )
            return answer_id

    async def set_reply_ref(self, *, turn_id: int, reply_ref: str) -> None:
        await self.db._execute("UPDATE turns SET reply_ref = $1 WHERE id = $2", reply_ref, turn_id)

    async def get_turn(self, *, turn_id: int) -> Turn | None:
        row = await self.db._fetchrow(f"SELECT {TURN_COLUMNS} FROM turns WHERE id = $1", turn_id)
        return turn_from_row(row) if row else None

    async def find_turn(self, *, conversation_key: str, platform_ref: str) -> Turn | None:
        row = await self.db._fetchrow(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_key = $1"
            " AND platform_ref = $2 AND role = 'user' ORDER BY id LIMIT 1",
            conversation_key,
            platform_ref,
        )
        return turn_from_row(row) if row else None

    async def answer_to(self, *, turn_id: int) -> Turn | None:
        row = await self.db._fetchrow(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE reply_to = $1 ORDER BY id LIMIT 1", turn_id
        )
        return turn_from_row(row) if row else None

    async def recent_turns(
        self, *, conversation_key: str, limit: int, before_id: int | None = None
    ) -> list[Turn]:
        if limit <= 0:
            return []
        rows = await self.db._fetch(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_key = $1 AND id < $2"
            " ORDER BY id DESC LIMIT $3",
            conversation_key,
            before_id if before_id is not None else 2**62,
            limit,
        )
        return [turn_from_row(r) for r in reversed(rows)]

    async def unanswered_turns(self, *, since: datetime, conversation_prefix: str) -> list[Turn]:
        """User turns stored since ``since`` in conversations starting with the prefix, with
        no answer, that no live replica is answering; oldest first."""
        rows = await self.db._fetch(
            f"WITH live AS ({_LIVE_REPLICAS})"
            f" SELECT {TURN_COLUMNS} FROM turns t WHERE t.role = 'user'"
            " AND t.reflection IS NOT NULL AND t.created_at >= $2"
            " AND starts_with(t.conversation_key, $3)"
            " AND (t.claimed_by IS NULL OR t.claimed_by = $4"
            "      OR t.claimed_by NOT IN (SELECT replica FROM live))"
            " AND NOT EXISTS (SELECT 1 FROM turns a WHERE a.reply_to = t.id) ORDER BY t.id",
            LOCK_REPLICA,
            since,
            conversation_prefix,
            self.db.replica_id,
        )
        return [turn_from_row(r) for r in rows]

    async def turns_to_reflect(self) -> list[Turn]:
        """User turns whose reflection is queued (``pending``: their answer was delivered)
        that no live replica holds, now claimed by this one; oldest first. A turn still
        ``answering`` is never taken: its answer comes first (the start-up recovery)."""
        await self.db.check_session()
        rows = await self.db._fetch(
            f"WITH live AS ({_LIVE_REPLICAS}), orphans AS ("
            f"  SELECT id FROM turns WHERE reflection IN {QUEUED_SQL}"
            "  AND (claimed_by IS NULL OR claimed_by NOT IN (SELECT replica FROM live))"
            "  ORDER BY id FOR UPDATE SKIP LOCKED"
            ") UPDATE turns t SET claimed_by = $2, claimed_at = $3 FROM orphans o"
            f" WHERE t.id = o.id RETURNING {', '.join('t.' + c for c in _TURN_NAMES)}",
            LOCK_REPLICA,
            self.db.replica_id,
            utcnow(),
        )
        return sorted((turn_from_row(r) for r in rows), key=lambda t: t.id)

    async def claim_event(self, *, keys: Sequence[str]) -> bool:
        """Claim a platform event by all its keys, atomically across replicas: the keys are
        inserted (in sorted order, so two claims cannot deadlock) and the claim stands only
        if none existed; otherwise it is rolled back and False returned."""
        if not keys:
            return True
        try:
            async with self.db._intake_tx() as conn:
                if not await self._claim(conn, keys):
                    raise _Unclaimed
        except _Unclaimed:
            return False
        return True

    async def _claim(self, conn: asyncpg.Connection, keys: Sequence[str]) -> bool:
        """Insert the claim of every key in ``conn``'s transaction; False when any existed
        (the caller then rolls the transaction back)."""
        wanted = sorted(set(keys))
        if not wanted:
            return True
        inserted = await conn.fetch(
            "INSERT INTO processed_events(event_key, claimed_at, claimed_by)"
            " SELECT k, $2, $3 FROM unnest($1::text[]) WITH ORDINALITY AS e(k, n)"
            " ORDER BY n ON CONFLICT DO NOTHING RETURNING event_key",
            wanted,
            utcnow(),
            self.db.replica_id,
        )
        return len(inserted) == len(wanted)

    async def claim_recovery(self, *, turn_id: int) -> bool:
        """One statement, atomic across replicas: insert the claim ``recover:{id}`` held by
        this replica, or take it over from a replica no longer holding its liveness lock
        (its process died, and with it the recovery it was running: the server dropped its
        session and the lock). A live holder, this replica included, keeps it (the row lock
        makes a second taker re-read the claim just taken, held by a live replica)."""
        await self.db.check_session()
        taken = await self.db._fetchval(
            f"WITH live AS ({_LIVE_REPLICAS})"
            " INSERT INTO processed_events(event_key, claimed_at, claimed_by) VALUES ($2, $3, $4)"
            " ON CONFLICT (event_key) DO UPDATE SET claimed_at = EXCLUDED.claimed_at,"
            " claimed_by = EXCLUDED.claimed_by WHERE processed_events.claimed_by IS NULL"
            " OR (processed_events.claimed_by <> EXCLUDED.claimed_by"
            "     AND processed_events.claimed_by NOT IN (SELECT replica FROM live))"
            " RETURNING 1",
            LOCK_REPLICA,
            recovery_key(turn_id),
            utcnow(),
            self.db.replica_id,
        )
        return taken is not None

    async def event_claimed_elsewhere(self, *, keys: Sequence[str]) -> bool:
        """True when a live replica other than this one claimed the event by any of its keys:
        it is answering it, or has. A claim of a replica that died is not (the event can be
        taken over)."""
        if not keys:
            return False
        return bool(
            await self.db._fetchval(
                f"WITH live AS ({_LIVE_REPLICAS}) SELECT EXISTS (SELECT 1 FROM processed_events"
                " WHERE event_key = ANY($2::text[]) AND claimed_by <> $3"
                " AND claimed_by IN (SELECT replica FROM live))",
                LOCK_REPLICA,
                list(keys),
                self.db.replica_id,
            )
        )

    async def get_mode(self, *, user_key: str) -> MemoryMode:
        mode = await self.db._fetchval(
            "SELECT mode FROM memory_modes WHERE user_key = $1", user_key
        )
        return cast(MemoryMode, mode) if mode else "on"

    async def mark_once(self, *, mark: str) -> bool:
        # Most marks are asked for again and again (a first-DM notice): read first, write
        # only a new one.
        if await self.db._fetchval("SELECT 1 FROM marks WHERE mark = $1", mark) is not None:
            return False
        status = await self.db._execute(
            "INSERT INTO marks(mark, at) VALUES ($1, $2) ON CONFLICT DO NOTHING", mark, utcnow()
        )
        return status == "INSERT 0 1"

    # ---------------------------------------------------------------- usage
    async def answered_message(
        self, *, user_key: str, platform_ref: str, conversation_prefix: str
    ) -> bool:
        prefix = conversation_prefix + ":"
        found = await self.db._fetchval(
            "SELECT 1 FROM turns u WHERE u.user_key = $1 AND u.platform_ref = $2"
            " AND u.role = 'user' AND (u.conversation_key = $3 OR left(u.conversation_key,"
            " $4) = $5) AND EXISTS (SELECT 1 FROM turns a WHERE a.reply_to = u.id) LIMIT 1",
            user_key,
            platform_ref,
            conversation_prefix,
            len(prefix),
            prefix,
        )
        return found is not None

    async def feedback_report(self, *, since: datetime) -> list[FeedbackRow]:
        # SQLite's order (the seam's): bytewise, no workspace first; not the collation's.
        rows = await self.db._fetch(
            "SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), workspace,"
            " COUNT(*) FILTER (WHERE positive), COUNT(*) FILTER (WHERE NOT positive)"
            " FROM feedback WHERE at >= $1 GROUP BY 1, 2"
            ' ORDER BY 1, workspace COLLATE "C" NULLS FIRST',
            since,
        )
        return [FeedbackRow(str(r[0]), r[1], int(r[2]), int(r[3])) for r in rows]

    async def usage_report(
        self,
        *,
        since: datetime,
        by: str = "kind",
        user_key: str | None = None,
        workspace: str | None = None,
    ) -> list[UsageRow]:
        group = usage_group_column(by)
        where, params = usage_filter(since, user_key, workspace)
        rows = await self.db._fetch(
            numbered(
                f"SELECT {group}, {USAGE_TOTALS} FROM usage WHERE {where} GROUP BY 1 ORDER BY 1"
            ),
            *params,
        )
        return [usage_row(r) for r in rows]

    async def chat_messages_since(
        self, *, since: datetime, user_key: str | None = None, workspace: str | None = None
    ) -> int:
        where, params = usage_filter(since, user_key, workspace)
        count = await self.db._fetchval(
            numbered(f"SELECT COUNT(*) FROM usage WHERE {where} AND kind = 'chat'"), *params
        )
        return int(count)

    # ---------------------------------------------------------------- pending actions
    async def take_pending(
        self, *, token: str, user_key: str, kind: str, now: datetime
    ) -> str | None:
        payload = await self.db._fetchval(
            "DELETE FROM pending_actions WHERE token = $1 AND user_key = $2 AND kind = $3"
            " AND expires_at > $4 RETURNING payload",
            token,
            user_key,
            kind,
            now,
        )
        return None if payload is None else str(payload)

    async def pending_owner(self, *, token: str, kind: str, now: datetime) -> str | None:
        owner = await self.db._fetchval(
            "SELECT user_key FROM pending_actions WHERE token = $1 AND kind = $2"
            " AND expires_at > $3",
            token,
            kind,
            now,
        )
        return None if owner is None else str(owner)


_TURN_NAMES = [c.strip() for c in TURN_COLUMNS.split(",")]
_TURN_INSERT = (
    "conversation_key, user_key, role, author, text, origin, sent_at, created_at, reply_to,"
    " reflection, platform_ref, workspace, thread_ref, claimed_by, claimed_at, place"
)


async def end_reflection(
    conn: asyncpg.Connection,
    turn_id: int,
    state: ReflectionState | None,
    attempts: int | None,
    usage: Sequence[UsageRecord],
) -> None:
    """Inside a transaction: record a reflection's ``usage`` and, unless ``state`` is None,
    the turn's reflection state (and ``attempts``, when given), only while the turn still
    waits for its reflection (``REFLECTING``): a turn turned ``off`` by a pause, or
    finished, stays as it is. With ``state`` None, ``attempts`` (when given) is only noted,
    never lowered: the usage of that attempt is in."""
    await _insert_usage(conn, usage)
    for sql, params in reflection_end(turn_id, state, attempts):
        await conn.execute(numbered(sql), *params)


async def _insert_usage(conn: asyncpg.Connection, usage: Sequence[UsageRecord]) -> None:
    if not usage:
        return
    await conn.executemany(_USAGE_INSERT, [usage_params(u, time=_as_is) for u in usage])
