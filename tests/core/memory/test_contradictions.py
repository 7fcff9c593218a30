"""Two active memories that contradict each other (core.rules.contradict), on both
backends: the prompt carries the newer one only, and ``memories audit`` lists the older as
contradicted (``--fix`` supersedes it by the newer, undoably)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from core.memory.audit import run_audit
from core.memory.profile import build_context
from core.memory.recall import BM25Recaller
from core.rules.contradict import contradicts, newest_first
from core.rules.dedupe import Deduper
from core.store.seams import Store
from core.types import Memory, NewMemory

ALICE = "cli:alice"
DAY = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("newer", "older"),
    [
        ("The user lives in Berlin.", "The user lives in Paris."),
        ("The user is based in Porto.", "The user lives in Lisbon."),
        ("The user prefers light mode.", "The user prefers dark mode."),
        ("The user prefers spaces over tabs.", "The user prefers tabs over spaces."),
        ("The user's time zone is CET.", "The user is in the PST time zone."),
        ("The user works at Globex.", "The user works for Acme."),
        ("The user's favourite editor is Neovim.", "The user's favourite editor is VS Code."),
    ],
)
def test_contradicts(newer: str, older: str) -> None:
    assert contradicts(newer, older) and contradicts(older, newer)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The user lives in Lisbon.", "The user lives in Lisbon with their partner."),
        ("The user's manager lives in Berlin.", "The user lives in Paris."),
        ("The user's favourite editor is Neovim.", "The user's favourite language is Go."),
        ("The user prefers dark chocolate.", "The user likes light beer."),
        ("The user has a dark cat and a light dog.", "The user has a light cat and a dark dog."),
        ("The user drinks coffee.", "The user drinks tea."),
        ("", "\u202e lives in"),
    ],
)
def test_does_not_contradict(a: str, b: str) -> None:
    assert not contradicts(a, b)


def memory(i: int, text: str, *, about: str | None = None, dated: bool = False) -> Memory:
    at = DAY + timedelta(days=i)
    until = date(2026, 12, 1) if dated else None
    return Memory(i, ALICE, text, "context", "general", "remember", "private", at, at,
                  about=about, valid_until=until)  # fmt: skip


def test_newest_first_keeps_the_newer() -> None:
    paris, berlin = memory(1, "The user lives in Paris."), memory(2, "The user lives in Berlin.")
    boss = memory(3, "The user's manager lives in Rome.", about="the user's manager")
    assert newest_first([paris, boss, berlin]) == [boss, berlin]
    # Dated memories (a trip, a stay) are both true in their time: not judged.
    stay = memory(4, "The user lives in Tokyo.", dated=True)
    assert newest_first([berlin, stay]) == [berlin, stay]


async def seed(store: Store) -> dict[str, int]:
    texts = [
        "The user lives in Paris.",
        "The user prefers dark mode.",
        "The user prefers concise answers.",
        "The user lives in Berlin.",
        "The user prefers light mode.",
    ]
    results = await store.add_many(
        user_key=ALICE,
        memories=[
            NewMemory(text=t, kind="context", created_at=DAY + timedelta(hours=i))
            for i, t in enumerate(texts)
        ],
        dedupe=None,
    )
    return {t: r.id for t, r in zip(texts, results, strict=True)}


async def test_the_prompt_carries_the_newer_of_two(store: Store) -> None:
    ids = await seed(store)
    ctx = await build_context(
        store=store,
        recaller=BM25Recaller(store),
        user_key=ALICE,
        message="Where do I live, and which mode do I like?",
        k=6,
        reach=None,
        budget_tokens=600,
        today=date(2026, 12, 5),
    )
    carried = set(ctx.ids)
    assert ids["The user lives in Berlin."] in carried
    assert ids["The user prefers light mode."] in carried
    assert ids["The user prefers concise answers."] in carried
    assert ids["The user lives in Paris."] not in carried
    assert ids["The user prefers dark mode."] not in carried


async def test_audit_lists_contradictions_and_fix_keeps_the_newer(store: Store) -> None:
    ids = await seed(store)
    report = await run_audit(store, deduper=Deduper(), now=DAY + timedelta(days=30))
    [alice] = report.users
    found = {(f.memory_id, f.related_id) for f in alice.findings if f.rule == "contradicted"}
    assert found == {
        (ids["The user lives in Paris."], ids["The user lives in Berlin."]),
        (ids["The user prefers dark mode."], ids["The user prefers light mode."]),
    }
    await run_audit(store, deduper=Deduper(), now=DAY + timedelta(days=30), fix=True)
    left = {m.text for m in await store.list_memories(user_key=ALICE)}
    assert left == {
        "The user prefers concise answers.",
        "The user lives in Berlin.",
        "The user prefers light mode.",
    }


async def test_audit_never_merges_another_persons_fact_with_the_users(store: Store) -> None:
    texts = [
        ("The user prefers short emails.", None),
        ("The user's manager prefers short emails.", "the user's manager"),
        ("The user lives in Paris.", None),
        ("The user's manager lives in Berlin.", "the user's manager"),
    ]
    await store.add_many(
        user_key=ALICE,
        memories=[
            NewMemory(text=t, about=a, created_at=DAY + timedelta(hours=i))
            for i, (t, a) in enumerate(texts)
        ],
        dedupe=None,
    )
    report = await run_audit(store, deduper=Deduper(), now=DAY + timedelta(days=30), fix=True)
    [alice] = report.users
    assert alice.findings == []
    assert len(await store.list_memories(user_key=ALICE)) == 4
