"""The one list of schema migrations: each step (one change: "places", "team memory",
"redact secrets") with its SQLite form and its PostgreSQL form side by side.

A step's form on a backend is its SQL, or the async function of the connection that
applies it when it needs Python, from that backend's module (:mod:`core.store.sqlite.migrations`,
:mod:`core.store.postgres.migrations`: only that backend's SQL lives there), with the
number and name a store records in its ``schema_migrations`` table. Until 0.2.0 the two
backends numbered their migrations apart (SQLite m001-m022, PostgreSQL m001-m019, with
gaps), and stores hold those numbers: each step keeps both, so a store migrated by an older
SelfMind upgrades by number and is never migrated twice. From m023 on a step has one
number and one name on both backends, one more than the largest either used before
(tests/core/store/test_migration_list.py holds every step to it).

Where one backend genuinely needs nothing (SQLite rebuilds a table to get AUTOINCREMENT,
PostgreSQL's identity columns never reuse an id), that side is :class:`NotNeeded` with the
reason; every other step has both forms. SQL both dialects run as it is is written once,
here, and given as both forms.

A step that changes or removes stored memories declares its :class:`~core.store.effects.Effect`
(said before it runs and after, :mod:`core.store.effects`); one in Python, or SQL writing to
``memories``, that changes none says why in ``unchanged``. The first SelfMind version that
knows each step is in :data:`core.store.schema.RELEASES`, keyed by the step.

Never edit a released step: add one at the end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from core.store.effects import Effect
from core.store.place_repair import PLACE_MEMORIES
from core.store.postgres import migrations as pg
from core.store.relabel import LABEL_REMEMBERED
from core.store.secret_repair import REDACT_SECRET_FORMS, REDACT_SECRETS
from core.store.sqlite import migrations as lite
from core.store.text_repair import CLEAN_TEXT
from core.store.thread_repair import THREAD_PLACES

Backend = Literal["sqlite", "postgres"]
BACKENDS: tuple[Backend, ...] = ("sqlite", "postgres")

Body = str | Callable[[Any], Awaitable[object]]
"""The SQL of a migration, or the async function of the backend's connection that applies
it (returning the :class:`~core.store.effects.Change` it made, when it changes memories
and counts them). Either runs in the migration's transaction."""

Migration = tuple[int, str, Body]
"""One backend's migration as its runner takes it: ``(number, name, body)``."""


M024_ACTIVE_TEXT_PER_REACH = """
-- One active copy of a sentence per reach, not per user (issue 35): a fact its owner said
-- word for word in a second place (a private channel's, said again in a public channel) is
-- stored for that place too, the first copy keeping its own. The old index's rows all
-- satisfy the new one.
DROP INDEX memories_active_norm;
CREATE UNIQUE INDEX memories_active_norm ON memories(uid, norm, reach)
    WHERE superseded_by IS NULL;
"""


M025_PLACED_INDEX = """
-- The active memories learned outside their owner's DM, by owner and reach (issue 35): the
-- copies of one sentence said in several places are among them, so a count of a user's
-- sentences (core.store.rows.ONE_COPY_COUNT: the prompt's count line, /memories, the Home
-- tab) reads these few, not every memory of the user.
CREATE INDEX memories_placed ON memories(uid, reach)
    WHERE superseded_by IS NULL AND reach <> 'dm';
"""


@dataclass(frozen=True)
class Form:
    """A step on one backend: the ``number`` and ``name`` stores record, and its ``body``."""

    number: int
    name: str
    body: Body


@dataclass(frozen=True)
class NotNeeded:
    """A backend on which a step has nothing to do, and why (one phrase)."""

    reason: str


@dataclass(frozen=True)
class Step:
    """One schema change on both backends.

    ``key``: the change's name (``places``); ``effect``: what it does to stored memories,
    or ``unchanged``: why a Python one (or SQL writing ``memories``) changes none."""

    key: str
    sqlite: Form | NotNeeded
    postgres: Form | NotNeeded
    effect: Effect | None = None
    unchanged: str | None = None

    def form(self, backend: Backend) -> Form | None:
        """This step's form on ``backend``; None where it needs nothing there."""
        side = self.sqlite if backend == "sqlite" else self.postgres
        return side if isinstance(side, Form) else None


def shared(
    key: str,
    number: int,
    name: str,
    *,
    sqlite: Body,
    postgres: Body,
    effect: Effect | None = None,
    unchanged: str | None = None,
) -> Step:
    """A step from m023 on: one ``number`` and one ``name`` on both backends."""
    return Step(key, Form(number, name, sqlite), Form(number, name, postgres), effect, unchanged)


NO_OWN_IDS = "an identity column never hands out an id twice"

STEPS: tuple[Step, ...] = (
    Step(
        "initial",
        Form(1, "m001_initial", lite.M001_INITIAL),
        Form(1, "m001_memories", pg.M001_MEMORIES),
    ),
    Step(
        "conversations",
        Form(2, "m002_conversations", lite.M002_CONVERSATIONS),
        Form(2, "m002_conversations", pg.M002_CONVERSATIONS),
    ),
    Step(
        "usage",
        Form(3, "m003_usage", lite.M003_USAGE),
        Form(3, "m003_usage", pg.M003_USAGE),
    ),
    Step(
        "cleanup_events",
        Form(4, "m004_cleanup", lite.M004_CLEANUP),
        NotNeeded("its m001 created memory_events with these event kinds and change_id"),
    ),
    Step(
        "embeddings",
        Form(5, "m005_embeddings", lite.M005_EMBEDDINGS),
        Form(4, "m004_embeddings", pg.M004_EMBEDDINGS),
    ),
    Step(  # SQLite also spreads its FTS5 index over shards here
        "forget_index",
        Form(6, "m006_sharded_fts", lite.M006_SHARDED_FTS),
        Form(5, "m005_forget_index", pg.M005_FORGET_INDEX),
    ),
    Step(
        "clean_text",
        Form(7, "m007_clean_text", lite.m007_clean_text),
        Form(6, "m006_clean_text", pg.m006_clean_text),
        effect=CLEAN_TEXT,
    ),
    Step(
        "pending_actions",
        Form(8, "m008_pending_actions", lite.M008_PENDING_ACTIONS),
        Form(7, "m007_pending_actions", pg.M007_PENDING_ACTIONS),
    ),
    Step(
        "feedback",
        Form(9, "m009_feedback", lite.M009_FEEDBACK),
        Form(8, "m008_feedback", pg.M008_FEEDBACK),
    ),
    Step(
        "reply_ref",
        Form(10, "m010_reply_ref", lite.M010_REPLY_REF),
        Form(9, "m009_reply_ref", pg.M009_REPLY_REF),
    ),
    Step(
        "memory_ids_never_reused",
        Form(11, "m011_ids_never_reused", lite.m011_ids_never_reused),
        NotNeeded(NO_OWN_IDS),
        unchanged="rebuilds the memories table with the same rows and ids",
    ),
    Step(
        "label_remembered",
        Form(12, "m012_label_remembered", lite.m012_label_remembered),
        Form(10, "m010_label_remembered", pg.m010_label_remembered),
        effect=LABEL_REMEMBERED,
    ),
    Step(
        "thread_ref",
        Form(13, "m013_thread_ref", lite.M013_THREAD_REF),
        Form(11, "m011_thread_ref", pg.M011_THREAD_REF),
    ),
    Step(
        "redact_secrets",
        Form(14, "m014_redact_secrets", lite.m014_redact_secrets),
        Form(12, "m012_redact_secrets", pg.m012_redact_secrets),
        effect=REDACT_SECRETS,
    ),
    Step(
        "memory_uses",
        Form(15, "m015_memory_uses", lite.M015_MEMORY_USES),
        Form(13, "m013_memory_uses", pg.M013_MEMORY_USES),
    ),
    Step(
        "turn_ids_never_reused",
        Form(16, "m016_turn_ids_never_reused", lite.m016_turn_ids_never_reused),
        NotNeeded(NO_OWN_IDS),
        unchanged="rebuilds the turns table; memories are not touched",
    ),
    Step(
        "places",
        Form(17, "m017_places", lite.m017_places),
        Form(14, "m014_places", pg.m014_places),
        effect=PLACE_MEMORIES,
    ),
    Step(
        "channel_memory",
        Form(18, "m018_channel_memory", lite.M018_CHANNEL_MEMORY),
        Form(15, "m015_channel_memory", pg.M015_CHANNEL_MEMORY),
    ),
    Step(
        "redact_secret_forms",
        Form(20, "m020_redact_secret_forms", lite.m020_redact_secret_forms),
        Form(17, "m017_redact_secret_forms", pg.m017_redact_secret_forms),
        effect=REDACT_SECRET_FORMS,
    ),
    Step(
        "memory_about_dates",
        Form(22, "m022_memory_about_dates", lite.M022_MEMORY_ABOUT_DATES),
        Form(19, "m019_memory_about_dates", pg.M019_MEMORY_ABOUT_DATES),
    ),
    # From here on: one number and one name on both backends.
    shared(
        "usage_kind_consolidation",
        23,
        "m023_usage_kind_consolidation",
        sqlite=lite.m023_usage_kind_consolidation,
        postgres=pg.M023_USAGE_KIND_CONSOLIDATION,
        unchanged="rebuilds (SQLite) or re-checks the usage table; memories are not touched",
    ),
    shared(
        "active_text_per_reach",
        24,
        "m024_active_text_per_reach",
        sqlite=M024_ACTIVE_TEXT_PER_REACH,
        postgres=M024_ACTIVE_TEXT_PER_REACH,
    ),
    shared(
        "placed_index",
        25,
        "m025_placed_index",
        sqlite=M025_PLACED_INDEX,
        postgres=M025_PLACED_INDEX,
    ),
    shared(
        "thread_places",
        26,
        "m026_thread_places",
        sqlite=lite.m026_thread_places,
        postgres=pg.m026_thread_places,
        effect=THREAD_PLACES,
    ),
)
"""Every step, oldest first; each backend applies its forms in this order (their numbers
grow with it)."""

SHARED_FROM = 23
"""The first number both backends share: every step from it on has one number and name."""


def migrations_of(backend: Backend) -> list[Migration]:
    """``backend``'s migrations as its runner applies them, ``(number, name, body)`` in
    order (the steps it needs nothing for left out)."""
    return [(form.number, form.name, form.body) for step in STEPS if (form := step.form(backend))]


def effects_of(backend: Backend) -> dict[str, Effect]:
    """The :class:`~core.store.effects.Effect` of each of ``backend``'s migrations that
    changes stored memories, by the migration's name there (what :class:`~core.store.effects.Notes`
    looks up)."""
    return {
        form.name: step.effect
        for step in STEPS
        if step.effect is not None and (form := step.form(backend))
    }


def step_of(backend: Backend, number: int) -> Step | None:
    """The step whose form on ``backend`` has migration ``number``; None if none has."""
    for step in STEPS:
        form = step.form(backend)
        if form is not None and form.number == number:
            return step
    return None
