"""Memory cleanup: plans from the fake Claude, applied as one change, undone exactly."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from typer.testing import CliRunner, Result

from bots.cli import app
from core.memory.cleanup import Cleaner
from core.rules.dedupe import Deduper
from core.types import NewMemory, Place
from tests.fakes.anthropic_server import FakeAnthropic, not_json, running_fake_anthropic
from tests.loop_helpers import API_KEY, harness

ALICE = "cli:alice"
REPHRASINGS = [
    "The user prefers dark mode in their editor.",
    "The user likes dark mode in the editor.",
    "The user prefers a dark editor theme.",
    "The user wants dark mode enabled in their code editor.",
    "The user uses a dark theme in the editor.",
    "The user prefers editors in dark mode.",
    "The user always switches the editor to dark mode.",
    "The user's editor is set to dark mode by preference.",
    "The user favours dark mode for editing code.",
    "The user prefers dark colour schemes in the editor.",
    "The user chooses dark mode in every editor they use.",
    "The user likes their code editor dark.",
]
OLD_HOME, NEW_HOME = "The user lives in Paris.", "The user lives in Berlin."


def oracle(body: dict[str, Any]) -> Any:
    """Plans like a careful model would: merge the dark-mode rephrasings, supersede Paris."""
    prompt = body["messages"][0]["content"]
    text = prompt if isinstance(prompt, str) else prompt[0]["text"]
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    dark = [r for r in rows if "dark" in r["text"]]
    ops = []
    if len(dark) >= 2:
        ops.append(
            {
                "op": "merge",
                "ids": [r["id"] for r in dark],
                "newer_id": 0,
                "text": "The user prefers dark mode in every code editor.",
                "kind": "preference",
                "category": "tools",
                "user_added": [r["id"] for r in dark if r["user_added"]],
                "reason": "rephrasings of one preference",
            }
        )
    homes = {r["text"]: r["id"] for r in rows}
    if OLD_HOME in homes and NEW_HOME in homes:
        ops.append(
            {
                "op": "supersede",
                "ids": [homes[OLD_HOME]],
                "newer_id": homes[NEW_HOME],
                "text": "",
                "kind": "fact",
                "category": "general",
                "user_added": [],
                "reason": "moved",
            }
        )
    return json.dumps({"operations": ops})


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(responder=oracle) as f:
        yield f


async def seed(h: Any) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    memories = [
        NewMemory(text=t, kind="preference", source="reflection", created_at=base + timedelta(i))
        for i, t in enumerate(REPHRASINGS)
    ]
    memories += [
        NewMemory(text=OLD_HOME, source="reflection", created_at=base),
        NewMemory(text=NEW_HOME, source="reflection", created_at=base + timedelta(days=30)),
        NewMemory(text="The user has a cat named Miso.", source="remember", created_at=base),
    ]
    results = await h.store.add_many(user_key=ALICE, memories=memories, dedupe=None)
    assert all(r.status == "added" for r in results)


async def snapshot(db_url: str) -> tuple[list[Any], list[Any]]:
    """Every row of ``memories`` and ``users``, read straight from either backend."""
    queries = ("SELECT * FROM memories ORDER BY id", "SELECT * FROM users ORDER BY uid")
    if db_url.startswith("sqlite:///"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            memories, users = (conn.execute(q).fetchall() for q in queries)
        return memories, users
    conn = await asyncpg.connect(db_url)
    try:
        memories, users = [[tuple(r) for r in await conn.fetch(q)] for q in queries]
    finally:
        await conn.close()
    return memories, users


async def test_plan_merges_rephrasings_and_supersedes(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        await seed(h)
        cleaner = Cleaner(store=h.store, model=h.model, batch_size=25, max_batches=5)
        before = await snapshot(db_url)
        run = await cleaner.plan(user_key=ALICE)
        assert await snapshot(db_url) == before  # a plan changes nothing
        assert run.before == 15
        merges = [p for p in run.planned if p.op.__class__.__name__ == "MergeOp"]
        supersedes = [p for p in run.planned if p.op.__class__.__name__ == "SupersedeOp"]
        assert len(merges) == 1 and len(merges[0].op.ids) == 12  # type: ignore[union-attr]
        assert len(supersedes) == 1
        assert run.calls == len(run.batches) and run.calls <= 5
        assert run.usage.input_tokens > 0

        await cleaner.apply(run)
        assert run.applied is not None and run.after == 3
        texts = sorted(m.text for m in await h.service.list_memories(user_key=ALICE))
        assert texts == sorted(
            [
                "The user prefers dark mode in every code editor.",
                NEW_HOME,
                "The user has a cat named Miso.",
            ]
        )
        found = await h.service.search(user_key=ALICE, query="where does the user live", k=3)
        assert [f.memory.text for f in found] == [NEW_HOME]
        events = await h.service.history(user_key=ALICE)
        changed = [e for e in events if e.change_id == run.applied.change_id]
        assert sorted(e.event for e in changed).count("superseded") == 13

        # Undo restores the exact rows (and the per-user BM25 statistics).
        restored = await h.store.undo_change(user_key=ALICE, change_id=run.applied.change_id)
        assert restored == 13
        assert await snapshot(db_url) == before
        found = await h.service.search(user_key=ALICE, query="Paris", k=3)
        assert [f.memory.text for f in found] == [OLD_HOME]
        with pytest.raises(Exception, match="already undone"):
            await h.store.undo_change(user_key=ALICE, change_id=run.applied.change_id)
    requests = fake.requests_of("extract")
    assert all(r.body["thinking"] == {"type": "disabled"} for r in requests)


async def test_remember_memories_are_flagged_or_protected(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        await seed(h)
        await h.store.add(
            user_key=ALICE,
            memory=NewMemory(
                text="The user set dark mode on purpose in the editor.", source="remember"
            ),
            dedupe=Deduper(0.99),
        )
        cleaner = Cleaner(store=h.store, model=h.model)
        run = await cleaner.plan(user_key=ALICE)
        (merge,) = [line for line in run.lines() if line.startswith("merge")]
        assert "[touches /remember memories" in merge

        # A plan that touches a /remember memory without saying so is discarded whole.
        fake.responder = _hide
        run = await cleaner.plan(user_key=ALICE)
        assert not any(line.startswith("merge") for line in run.lines())
        assert run.rejected_batches >= 1


def _hide(body: dict[str, Any]) -> str:
    plan = json.loads(oracle(body))
    for op in plan["operations"]:
        op["user_added"] = []
    return json.dumps(plan)


async def test_malformed_plan_changes_nothing(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        await seed(h)
        before = await snapshot(db_url)
        fake.enqueue(not_json(), kind="extract", times=10)
        cleaner = Cleaner(store=h.store, model=h.model)
        run = await cleaner.apply(await cleaner.plan(user_key=ALICE))
        assert run.planned == [] and run.applied is None
        assert run.rejected_batches == len(run.batches) >= 1
        assert await snapshot(db_url) == before


def cli(db: str, base_url: str, *args: str) -> Result:
    env = {"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": base_url}
    return CliRunner(env=env).invoke(app, ["--db", str(db), *args])


async def test_cli_dry_run_apply_history_undo(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        await seed(h)
    before = await snapshot(db_url)
    dry = await asyncio.to_thread(
        cli,
        db_url,
        fake.base_url,
        "memories",
        "cleanup",
        "--user",
        "alice",
        "--dry-run",
        "--json",
    )
    assert dry.exit_code == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] and plan["change_id"] is None and len(plan["plan"]) == 2
    assert await snapshot(db_url) == before

    applied = await asyncio.to_thread(
        cli, db_url, fake.base_url, "memories", "cleanup", "--user", "alice", "--json"
    )
    result = json.loads(applied.stdout)
    assert (result["before"], result["after"]) == (15, 3)
    change = result["change_id"]
    history = await asyncio.to_thread(
        cli, db_url, fake.base_url, "memories", "history", "--user", "alice", "--json"
    )
    assert any(e["change"] == change for e in json.loads(history.stdout))
    undo = await asyncio.to_thread(
        cli, db_url, fake.base_url, "memories", "undo", "--user", "alice", change, "--json"
    )
    assert json.loads(undo.stdout) == {"restored": 13}
    assert await snapshot(db_url) == before
    again = await asyncio.to_thread(
        cli, db_url, fake.base_url, "memories", "undo", "--user", "bob", change
    )
    assert again.exit_code == 1 and re.search(r"no change .* for this user", again.stderr)


def merge_rephrasings_only(body: dict[str, Any]) -> Any:
    """Plans a merge of the dark-mode rephrasings, and of nothing else."""
    prompt = body["messages"][0]["content"]
    text = prompt if isinstance(prompt, str) else prompt[0]["text"]
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    ids = [r["id"] for r in rows if r["text"] in REPHRASINGS]
    op = {
        "op": "merge",
        "ids": ids,
        "newer_id": 0,
        "text": "The user prefers dark mode in every code editor.",
        "kind": "preference",
        "category": "tools",
        "user_added": [],
        "reason": "rephrasings of one preference",
    }
    return json.dumps({"operations": [op] if len(ids) >= 2 else []})


@pytest.mark.parametrize(
    ("outside", "merged_in"),
    [
        # the merged sentence narrows it: merged in too (superseded by the new sentence)
        ("The user prefers dark mode.", True),
        # the merged sentence adds nothing to it: the merged ones are superseded by it
        ("The user prefers dark mode in every code editor and terminal.", False),
    ],
)
async def test_a_merge_follows_the_dedupe_rule(db_url: str, outside: str, merged_in: bool) -> None:
    """Issue 26: a cleanup merge is a write like any other; the rule judges its sentence
    against the memories no operation touches."""
    async with (
        running_fake_anthropic(responder=merge_rephrasings_only) as fake,
        harness(fake, db_url) as h,
    ):
        base = datetime(2026, 1, 1, tzinfo=UTC)
        first = [NewMemory(text=t, source="reflection", created_at=base) for t in REPHRASINGS[:2]]
        await h.store.add_many(user_key=ALICE, memories=first, dedupe=None)
        extra = await h.store.add_many(
            user_key=ALICE, memories=[NewMemory(text=outside, source="remember")], dedupe=None
        )
        cleaner = Cleaner(store=h.store, model=h.model, batch_size=25, max_batches=5)
        run = await cleaner.plan(user_key=ALICE)
        await cleaner.apply(run)
        assert run.applied is not None
        active = [m.text for m in await h.service.list_memories(user_key=ALICE)]
        kept = await h.store.get(user_key=ALICE, memory_id=extra[0].id)
        assert kept is not None
        if merged_in:
            assert active == ["The user prefers dark mode in every code editor."]
            assert kept.superseded_by is not None
            assert [p.user_added for p in run.planned] == [(extra[0].id,)]  # flagged
        else:
            assert active == [outside] and kept.superseded_by is None
            assert run.applied.added == ()
        # undone exactly, as any cleanup
        await h.store.undo_change(user_key=ALICE, change_id=run.applied.change_id)
        assert len(await h.service.list_memories(user_key=ALICE)) == 3


async def test_copies_of_a_sentence_said_in_several_places_are_sent_once(
    fake: FakeAnthropic, db_url: str
) -> None:
    # The same sentence learned in a group DM and said again in a public channel: Claude
    # sees it once, so no plan can take one copy for a duplicate of the other.
    tabs = "The user prefers tabs over spaces."
    places = [Place("slack", "group_dm", "T1", "G1"), Place("slack", "public_channel", "T1", "C1")]
    async with harness(fake, db_url) as h:
        for place in places:
            await h.store.add(user_key=ALICE, memory=NewMemory(tabs, place=place), dedupe=Deduper())
        await h.store.add(user_key=ALICE, memory=NewMemory(OLD_HOME), dedupe=Deduper())
        cleaner = Cleaner(store=h.store, model=h.model, batch_size=25, max_batches=5)
        run = await cleaner.plan(user_key=ALICE)
        assert run.before == 2
        [request] = fake.requests_of("extract")
        assert json.dumps(request.body).count("tabs over spaces") == 1
        await cleaner.apply(run)
        assert run.after == run.before == 2  # "Cleaned up: 2 → 2", counted as listed
        assert {m.place for m in await h.store.export(user_key=ALICE) if m.text == tabs} == set(
            places
        )
