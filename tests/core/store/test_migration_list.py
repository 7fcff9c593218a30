"""The one migration list (:mod:`core.store.migrations`): every step has its SQLite and its
PostgreSQL form (or a reason one backend needs nothing), the numbers stores recorded before
it stay as they were, and from m023 on a step has one number and one name on both."""

from __future__ import annotations

import re

import pytest

from core.store.migrations import (
    BACKENDS,
    SHARED_FROM,
    STEPS,
    Backend,
    Form,
    NotNeeded,
    Step,
    effects_of,
    migrations_of,
    step_of,
)
from core.store.postgres import base as pg_base
from core.store.sqlite import base as sqlite_base

# What stores hold: the (number, name) of every migration each backend had before the one
# list. A store migrated by 0.2.0 records these; they must never change.
SQLITE_HISTORY = [
    (1, "m001_initial"),
    (2, "m002_conversations"),
    (3, "m003_usage"),
    (4, "m004_cleanup"),
    (5, "m005_embeddings"),
    (6, "m006_sharded_fts"),
    (7, "m007_clean_text"),
    (8, "m008_pending_actions"),
    (9, "m009_feedback"),
    (10, "m010_reply_ref"),
    (11, "m011_ids_never_reused"),
    (12, "m012_label_remembered"),
    (13, "m013_thread_ref"),
    (14, "m014_redact_secrets"),
    (15, "m015_memory_uses"),
    (16, "m016_turn_ids_never_reused"),
    (17, "m017_places"),
    (18, "m018_channel_memory"),
    (20, "m020_redact_secret_forms"),
    (22, "m022_memory_about_dates"),
]
POSTGRES_HISTORY = [
    (1, "m001_memories"),
    (2, "m002_conversations"),
    (3, "m003_usage"),
    (4, "m004_embeddings"),
    (5, "m005_forget_index"),
    (6, "m006_clean_text"),
    (7, "m007_pending_actions"),
    (8, "m008_feedback"),
    (9, "m009_reply_ref"),
    (10, "m010_label_remembered"),
    (11, "m011_thread_ref"),
    (12, "m012_redact_secrets"),
    (13, "m013_memory_uses"),
    (14, "m014_places"),
    (15, "m015_channel_memory"),
    (17, "m017_redact_secret_forms"),
    (19, "m019_memory_about_dates"),
]


def test_every_step_has_both_backends_or_says_why_one_needs_nothing() -> None:
    keys = [step.key for step in STEPS]
    assert len(set(keys)) == len(keys) and all(re.fullmatch(r"[a-z][a-z_]*", k) for k in keys)
    for step in STEPS:
        sides = (step.sqlite, step.postgres)
        assert all(isinstance(side, Form | NotNeeded) for side in sides), step.key
        assert any(isinstance(side, Form) for side in sides), f"{step.key}: on no backend"
        for side in sides:
            if isinstance(side, NotNeeded):
                assert len(side.reason.split()) >= 4, f"{step.key}: say why it needs nothing"
    # the steps a backend needs nothing for are the known ones, each with its reason
    assert {s.key for s in STEPS if s.form("sqlite") is None} == set()
    assert {s.key for s in STEPS if s.form("postgres") is None} == {
        "cleanup_events",
        "memory_ids_never_reused",
        "turn_ids_never_reused",
    }


@pytest.mark.parametrize("which", BACKENDS)
def test_numbers_grow_with_the_list_and_name_their_migration(which: Backend) -> None:
    forms = [form for step in STEPS if (form := step.form(which))]
    numbers = [form.number for form in forms]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    for form in forms:
        assert form.name.startswith(f"m{form.number:03d}_"), form.name
        assert isinstance(form.body, str) or callable(form.body)
        assert step_of(which, form.number) is not None
    assert step_of(which, 999) is None
    # what the runners apply is this list
    runner = sqlite_base if which == "sqlite" else pg_base
    assert migrations_of(which) == runner.MIGRATIONS
    assert effects_of(which) == runner.EFFECTS
    assert [(n, name) for n, name, _ in migrations_of(which)] == [(f.number, f.name) for f in forms]


@pytest.mark.parametrize("which", BACKENDS)
def test_the_numbers_stores_recorded_before_the_list_are_kept(which: Backend) -> None:
    """A store migrated by 0.2.0 holds these numbers and names: the list names them all,
    in the same order, so it is upgraded by what follows and never migrated twice."""
    history = SQLITE_HISTORY if which == "sqlite" else POSTGRES_HISTORY
    known = [(number, name) for number, name, _ in migrations_of(which)]
    assert known[: len(history)] == history
    assert all(number > history[-1][0] for number, _ in known[len(history) :])


def test_from_m023_on_one_number_and_one_name_on_both_backends() -> None:
    newest_before = max(SQLITE_HISTORY[-1][0], POSTGRES_HISTORY[-1][0])
    assert newest_before + 1 == SHARED_FROM
    later = [s for s in STEPS if any(f.number >= SHARED_FROM for f in _forms(s))]
    assert later, "the first shared step is m023"
    for step in later:
        lite, pg = step.form("sqlite"), step.form("postgres")
        assert lite is not None and pg is not None, f"{step.key}: both backends from m023 on"
        assert (lite.number, lite.name) == (pg.number, pg.name), step.key
    # and nothing before m023 claims a shared number
    assert all(f.number < SHARED_FROM for s in STEPS if s not in later for f in _forms(s))


def _forms(step: Step) -> list[Form]:
    return [form for backend in BACKENDS if (form := step.form(backend))]
