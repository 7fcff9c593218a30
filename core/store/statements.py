"""Writes both backends run as the same statements, written once: SQL text with ``?``
placeholders and its parameters, in the order to run them in one transaction.

:class:`StatementRules` holds the store methods that are only such statements (a memory
mode change, a reflection's end, pruning turns, a call's usage, a pending action put or
dropped, feedback; a channel's: :class:`core.store.channels.ChannelRules`); a backend
supplies one hook,
:meth:`StatementHook._run_statements`, that runs statements in one write transaction of its
own: SQLite as they are, with each ``datetime`` parameter as its stored ISO text;
PostgreSQL with the placeholders numbered (:func:`core.store.postgres.migrations.numbered`).
The rule (which statements, in which order) is here; the transaction is the backend's.
:func:`reflection_end` and :data:`USAGE_INSERT` are statements a backend runs inside
transactions of its own (a reflection's end, a turn's finish)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime

from core.store.writes import QUEUED_SQL, REFLECTING_SQL
from core.types import MemoryMode, ReflectionState, UsageRecord, utcnow

Statement = tuple[str, tuple[object, ...]]
"""SQL text with ``?`` placeholders and its parameters (times as aware ``datetime``)."""


class StatementHook(ABC):
    """The one hook the statement rules write through (:class:`StatementRules`,
    :class:`core.store.channels.ChannelRules`): each backend's connection implements it
    (:meth:`core.store.sqlite.base.SQLiteBase._run_statements`,
    :meth:`core.store.postgres.base.PostgresBase._run_statements`), a part reaches it through
    its connection (:class:`core.store.composed.Part`)."""

    @abstractmethod
    async def _run_statements(
        self, statements: Sequence[Statement], *, retry: bool = False
    ) -> list[int]:
        """Run ``statements`` in order in one write transaction, committed on return (an
        error rolls all back); returns how many rows each changed. ``retry``: run the
        transaction again when the database aborts it to break a deadlock (PostgreSQL; a
        user's mode change crosses the turn loop's locks)."""


class StatementRules(StatementHook):
    """The store methods that are statements both backends run as they are (held by each
    backend's conversations part)."""

    async def set_mode(self, *, user_key: str, mode: MemoryMode) -> None:
        """:meth:`core.store.seams.ModeStore.set_mode`. ``on`` is the default, kept as no
        row. Any other mode is stored and stops learning from the user's turns not reflected
        on yet (``answering`` or ``pending``) in the same transaction, so the reflection of a
        turn in between needs no second read of the mode."""
        if mode == "on":
            await self._run_statements(
                [("DELETE FROM memory_modes WHERE user_key = ?", (user_key,))], retry=True
            )
            return
        upsert = (
            "INSERT INTO memory_modes(user_key, mode, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (user_key) DO UPDATE SET mode = excluded.mode,"
            " updated_at = excluded.updated_at"
        )
        stop = (
            "UPDATE turns SET reflection = 'off'"
            f" WHERE user_key = ? AND reflection IN {REFLECTING_SQL}"
        )
        await self._run_statements(
            [(upsert, (user_key, mode, utcnow())), (stop, (user_key,))], retry=True
        )

    async def put_pending(
        self,
        *,
        token: str,
        user_key: str,
        kind: str,
        payload: str,
        expires_at: datetime,
        replace: bool = False,
    ) -> None:
        """:meth:`core.store.seams.PlanStore.put_pending`: expired actions go first (every
        put sweeps them), then with ``replace`` the user's pending action of the same
        ``kind``, then the new one."""
        statements: list[Statement] = [
            ("DELETE FROM pending_actions WHERE expires_at <= ?", (utcnow(),))
        ]
        if replace:
            statements.append(
                ("DELETE FROM pending_actions WHERE user_key = ? AND kind = ?", (user_key, kind))
            )
        insert = (
            "INSERT INTO pending_actions(token, user_key, kind, payload, expires_at)"
            " VALUES (?, ?, ?, ?, ?)"
        )
        statements.append((insert, (token, user_key, kind, payload, expires_at)))
        await self._run_statements(statements)

    async def set_reflection(
        self,
        *,
        turn_id: int,
        state: ReflectionState,
        attempts: int | None = None,
        usage: Sequence[UsageRecord] = (),
    ) -> None:
        """:meth:`core.store.seams.ReflectionQueue.set_reflection`: the usage, then the
        turn's state (:func:`reflection_end`), in one transaction."""
        rows = [(USAGE_INSERT, usage_params(u, time=_as_is)) for u in usage]
        await self._run_statements([*rows, *reflection_end(turn_id, state, attempts)])

    async def prune_turns(self, *, older_than: datetime) -> int:
        """:meth:`core.store.seams.TurnStore.prune_turns`: turns older than ``older_than``
        whose reflection is not queued, and the platform events claimed before it."""
        turns, _ = await self._run_statements(
            [
                (
                    "DELETE FROM turns WHERE created_at < ? AND (reflection IS NULL OR"
                    f" reflection NOT IN {QUEUED_SQL})",
                    (older_than,),
                ),
                ("DELETE FROM processed_events WHERE claimed_at < ?", (older_than,)),
            ]
        )
        return turns

    async def record_usage(self, *, usage: UsageRecord) -> None:
        """:meth:`core.store.seams.UsageStore.record_usage`."""
        await self._run_statements([(USAGE_INSERT, usage_params(usage, time=_as_is))])

    async def drop_pending(self, *, token: str) -> None:
        """:meth:`core.store.seams.PlanStore.drop_pending`."""
        await self._run_statements([("DELETE FROM pending_actions WHERE token = ?", (token,))])

    async def record_feedback(
        self,
        *,
        answer_ref: str,
        user_key: str,
        workspace: str | None,
        positive: bool,
        at: datetime | None = None,
    ) -> None:
        """:meth:`core.store.seams.FeedbackStore.record_feedback`: one vote per answer and
        person, the last one kept."""
        upsert = (
            "INSERT INTO feedback(answer_ref, user_key, workspace, positive, at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (answer_ref, user_key) DO UPDATE SET"
            " workspace = excluded.workspace, positive = excluded.positive, at = excluded.at"
        )
        params = (answer_ref, user_key, workspace, positive, at or utcnow())
        await self._run_statements([(upsert, params)])


def reflection_end(
    turn_id: int, state: ReflectionState | None, attempts: int | None
) -> list[Statement]:
    """The turn's side of a reflection's end (its usage: :data:`USAGE_INSERT`): unless
    ``state`` is None, the turn's reflection state (and ``attempts``, when given), only while
    the turn still waits for its reflection (``REFLECTING``): a turn turned ``off`` by a
    pause, or finished, stays as it is. With ``state`` None, ``attempts`` (when given) is
    only noted, never lowered: the usage of that attempt is in."""
    if state is None:
        if attempts is None:
            return []
        return [
            (
                "UPDATE turns SET attempts = ? WHERE id = ? AND attempts < ?",
                (attempts, turn_id, attempts),
            )
        ]
    return [
        (
            "UPDATE turns SET reflection = ?, attempts = coalesce(?, attempts)"
            f" WHERE id = ? AND reflection IN {REFLECTING_SQL}",
            (state, attempts, turn_id),
        )
    ]


USAGE_INSERT = (
    "INSERT INTO usage(at, user_key, workspace, kind, model, input_tokens,"
    " output_tokens, cache_read_input_tokens, cache_creation_input_tokens, turn_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""One Claude call's usage row (parameters: :func:`usage_params`)."""


def usage_params(usage: UsageRecord, *, time: Callable[[datetime], object]) -> tuple[object, ...]:
    """:data:`USAGE_INSERT`'s parameters for ``usage`` (at now when it has no time; ``time``
    turns a time into the backend's form)."""
    return (
        time(usage.at or utcnow()),
        usage.user_key,
        usage.workspace,
        usage.kind,
        usage.model,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_input_tokens,
        usage.cache_creation_input_tokens,
        usage.turn_id,
    )


def _as_is(at: datetime) -> datetime:
    return at
