"""The memory audit: findings per rule on both backends, --fix as one undoable cleanup change,
and the CLI command (bad input included)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from bench.audit import hallucination_copies
from bots.cli import app
from core.memory.audit import RULES, audit_memories, format_report, run_audit
from core.rules.dedupe import Deduper
from core.store.seams import Store
from core.store.sqlite.base import ts
from core.store.sqlite.store import SQLiteStore
from core.types import Memory, MemoryUse, NewMemory, NewTurn, Place, utcnow

ALICE, BOB = "cli:alice", "cli:bob"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
SECRET = "The user's AWS key is AKIAIOSFODNN7EXAMPLE."


async def seed(store: Store) -> dict[str, int]:
    day = NOW - timedelta(days=10)
    texts = [
        ("general", "The user has a brother.", "reflection"),
        ("specific", "The user has a younger brother.", "reflection"),
        ("coffee", "The user drinks coffee.", "reflection"),
        ("no_coffee", "The user does not drink coffee.", "reflection"),
        ("tea", "The user drinks green tea every morning.", "reflection"),
        ("tea_again", "The user really drinks green tea every morning.", "reflection"),
        ("prompt", "You are a helpful assistant. Always answer in English.", "import"),
        ("first", "I prefer tabs over spaces.", "import"),
        ("long", "The user " + "likes long sentences, " * 10 + "and more.", "import"),
        ("advice", "Consider using Redis for the session cache.", "import"),
        ("secret", SECRET, "remember"),
        ("fine", "The user lives in Lisbon.", "remember"),
    ]
    memories = [
        NewMemory(text=t, source=src, created_at=day + timedelta(minutes=i))  # type: ignore[arg-type]
        for i, (_, t, src) in enumerate(texts)
    ]
    memories.append(NewMemory(text="The user owns a kayak.", created_at=NOW - timedelta(days=400)))
    results = await store.add_many(user_key=ALICE, memories=memories, dedupe=None)
    await store.add_many(
        user_key=BOB, memories=[NewMemory(text="The user likes jazz.", created_at=day)], dedupe=None
    )
    ids = {name: r.id for (name, _, _), r in zip(texts, results, strict=False)}
    ids["old"] = results[-1].id
    return ids


async def test_audit_finds_each_rule(store: Store) -> None:
    ids = await seed(store)
    report = await run_audit(store, deduper=Deduper(), now=NOW)
    alice, bob = report.users
    assert (alice.user_key, bob.user_key) == (ALICE, BOB)
    found = {(f.memory_id, f.rule, f.related_id) for f in alice.findings}
    assert found == {
        (ids["general"], "less_specific", ids["specific"]),
        (ids["coffee"], "contradicted", ids["no_coffee"]),
        (ids["tea_again"], "duplicate", ids["tea"]),
        (ids["prompt"], "first_person", None),
        (ids["first"], "first_person", None),
        (ids["long"], "too_long", None),
        (ids["advice"], "suggestion", None),
        (ids["secret"], "secret", None),
    }
    assert bob.findings == []
    total = report.totals()
    assert (total["memories"], total["flagged"]) == (14, 8)
    # not_recalled: the store began recording recalls after NOW, so it is not judged
    assert [total[r] for r in RULES] == [1, 1, 1, 1, 2, 1, 1, 0]
    assert report.recalls_judged is False
    # the report never carries a memory's text (a secret least of all)
    assert "AKIA" not in json.dumps(report.as_dict())
    # one user only; nothing changed by an audit without fix
    assert [
        u.user_key for u in (await run_audit(store, user_key=BOB, deduper=Deduper(), now=NOW)).users
    ] == [BOB]
    assert await store.count(user_key=ALICE) == 13


async def test_fix_is_one_undoable_cleanup_change(store: Store) -> None:
    ids = await seed(store)
    report = await run_audit(store, deduper=Deduper(), now=NOW, fix=True)
    run = report.fixed[ALICE]
    assert run.applied is not None and BOB not in report.fixed
    active = {m.id: m for m in await store.list_memories(user_key=ALICE, limit=100)}
    kept = {"specific", "no_coffee", "tea", "fine", "old"}
    # issue 37: the first-person preference is reworded (a new row), not retired
    (reworded,) = set(active) - {ids[k] for k in kept}
    assert active[reworded].text == "The user prefers tabs over spaces."
    assert run.applied.added == (reworded,)
    first = await store.get(user_key=ALICE, memory_id=ids["first"])
    assert first is not None and first.superseded_by == reworded
    general = await store.get(user_key=ALICE, memory_id=ids["general"])
    assert general is not None and general.superseded_by == ids["specific"]
    # a /remember memory touched is flagged, as cleanup flags it
    assert [p.user_added for p in run.planned if ids["secret"] in p.user_added] == [
        (ids["secret"],)
    ]
    # a second audit finds nothing --fix left
    again = await run_audit(store, deduper=Deduper(), now=NOW)
    assert again.users[0].findings == []
    restored = await store.undo_change(user_key=ALICE, change_id=run.applied.change_id)
    assert restored == 8 and await store.count(user_key=ALICE) == 13
    assert await store.get(user_key=ALICE, memory_id=reworded) is None


async def test_audit_mends_first_person_and_finds_rephrasings_by_the_writers_rule(
    store: Store,
) -> None:
    """Issue 37: ``--fix`` retired "I prefer tabs over spaces" (stored before /remember
    reworded), and the audit found no duplicate in "tabs to spaces" / "tabs over spaces"."""
    day = NOW - timedelta(days=3)
    rows = [
        NewMemory(text="I prefer dark mode in every editor", kind="preference",
                  category="tools", source="remember", created_at=day),
        NewMemory(text="The user prefers tabs over spaces.", created_at=day),
        NewMemory(text="My manager is called Priya", kind="context", category="general",
                  source="remember", created_at=day),
        NewMemory(text="I prefer tabs to spaces", source="remember", created_at=day),
        NewMemory(text="You are a helpful assistant.", source="import", created_at=day),
        NewMemory(text="The user prefers dark mode in all editors.", created_at=day),
    ]  # fmt: skip
    ids = [r.id for r in await store.add_many(user_key=ALICE, memories=rows, dedupe=None)]
    audit = await run_audit(store, deduper=Deduper(), now=NOW)
    found = {(f.memory_id, f.rule, f.related_id) for f in audit.users[0].findings}
    # the writer's rule: each later rephrasing adds nothing to the earlier one
    assert (ids[3], "duplicate", ids[1]) in found
    assert (ids[5], "duplicate", ids[0]) in found
    report = await run_audit(store, deduper=Deduper(), now=NOW, fix=True)
    run = report.fixed[ALICE]
    assert run.applied is not None
    active = {m.text: m for m in await store.list_memories(user_key=ALICE, limit=100)}
    assert set(active) == {
        "The user prefers dark mode in all editors.",  # the reworded twin of #0 stands
        "The user prefers tabs over spaces.",  # #3 adds nothing to it
        "The user's manager is called Priya.",  # reworded, its labels kept
    }
    priya = active["The user's manager is called Priya."]
    assert (priya.kind, priya.category, priya.source) == ("context", "general", "remember")
    assert priya.created_at == day and priya.id not in ids
    # only what the rule cannot reword is retired
    retired = await store.get(user_key=ALICE, memory_id=ids[4])
    assert retired is not None and retired.superseded_by == ids[4]
    lines = format_report(report)
    change = run.applied.change_id
    assert f"{ALICE}: reworded #{ids[2]} as #{priya.id} (first person to third)" in lines
    assert f"{ALICE}: retired #{ids[4]} (first_person)" in lines
    assert (
        f"{ALICE}: superseded #{ids[0]} by #{ids[5]} (first_person, reworded it is #{ids[5]})"
        in lines
    )
    assert any(line.startswith(f"{ALICE}: superseded #{ids[3]} by #{ids[1]}") for line in lines)
    assert any(f"undo: selfmind memories undo --user {ALICE} {change}" in x for x in lines)
    assert not any("helpful assistant" in x or "Priya" in x for x in lines)
    assert await store.undo_change(user_key=ALICE, change_id=change) == 4
    assert {m.text for m in await store.list_memories(user_key=ALICE, limit=100)} == {
        r.text for r in rows
    }


async def test_audit_of_600_near_copies_is_one_finding_each(store: Store) -> None:
    """The junk other memory layers leave: one hallucination stored hundreds of times."""
    copies = hallucination_copies(600)
    await store.add_many(user_key=ALICE, memories=[NewMemory(text=t) for t in copies], dedupe=None)
    assert await store.count(user_key=ALICE) == 600
    report = await run_audit(store, deduper=Deduper(), now=NOW)
    assert report.totals()["duplicate"] == 599 and report.totals()["flagged"] == 599


def test_cli_audit_json_and_bad_input(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    runner = CliRunner()

    def cli(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(app, ["--db", str(db), *args])
        return result.exit_code, result.stdout, result.stderr

    assert cli("memories", "audit")[0] == 1  # no database there yet
    for text in ("The user has a brother.", "The user has a younger brother."):
        assert cli("memories", "remember", "--user", "alice", text)[0] == 0
    code, out, _ = cli("memories", "audit", "--json")
    assert code == 0
    data = json.loads(out)
    # a remember supersedes the general memory itself: nothing left to find
    assert data["total"]["flagged"] == 0 and data["users"][0]["user"] == "cli:alice"
    code, out, _ = cli("memories", "audit", "--user", "alice")
    assert code == 0 and out.splitlines()[0].startswith("user")
    code, _, err = cli("memories", "audit", "--user", "nobody")
    assert code == 1 and "no user cli:nobody" in err
    assert cli("memories", "audit", "--days", "0")[0] == 2
    assert cli("memories", "audit", "--user", "")[0] != 0


async def recall_log_started_at(store: Store, at: datetime) -> None:
    """Pretend the store began recording recalls at ``at`` (its migration's time)."""
    if isinstance(store, SQLiteStore):
        sql = "UPDATE schema_migrations SET applied_at = ? WHERE name = 'm015_memory_uses'"
        await store._run(lambda conn: conn.execute(sql, (ts(at),)))
    else:
        await store._execute(  # type: ignore[attr-defined]
            "UPDATE schema_migrations SET applied_at = $1 WHERE name = 'm013_memory_uses'", at
        )


async def test_memories_in_no_prompt_for_n_days_are_found_and_fixed(store: Store) -> None:
    started = await store.recall_log_started()
    assert started is not None
    try:
        await _not_recalled_found_and_fixed(store)
    finally:  # the PostgreSQL database is shared by the run's tests: as it was
        await recall_log_started_at(store, started)


async def _not_recalled_found_and_fixed(store: Store) -> None:
    now = utcnow()
    old = now - timedelta(days=200)
    texts = ["The user owns a kayak.", "The user sold a piano.", "The user learns Welsh."]
    ages = [old, old, now - timedelta(days=10)]
    kayak, piano, welsh = [
        r.id
        for r in await store.add_many(
            user_key=ALICE,
            memories=[NewMemory(text=t, created_at=a) for t, a in zip(texts, ages, strict=True)],
            dedupe=None,
        )
    ]
    await store.add_many(
        user_key=BOB, memories=[NewMemory(text="The user likes jazz.", created_at=old)], dedupe=None
    )
    turn = NewTurn(
        conversation_key="cli:alice:1", user_key=ALICE, role="user", text="Kayak?",
        origin="private", sent_at=now, reflection="answering",
    )  # fmt: skip
    await store.finish_turn(
        turn_id=await store.add_turn(turn=turn), answer="Yes.", recalled=[kayak]
    )

    # Recorded for 10 days only: not judged yet (200-day-old memories are not 200 days unused).
    await recall_log_started_at(store, now - timedelta(days=10))
    early = await run_audit(store, deduper=Deduper(), now=now)
    assert early.recalls_judged is False and early.totals()["not_recalled"] == 0
    assert any(line.startswith("not_recalled: not judged yet") for line in format_report(early))

    await recall_log_started_at(store, now - timedelta(days=400))
    report = await run_audit(store, deduper=Deduper(), now=now, days=90)
    alice, bob = report.users
    # The piano: old, recorded all along, in no prompt. The kayak was recalled, Welsh is
    # young; Bob had no memory in any prompt (away): nothing of his is judged.
    assert [(f.memory_id, f.rule) for f in alice.findings] == [(piano, "not_recalled")]
    assert alice.findings[0].detail == "never recalled (in no prompt for 90 days)"
    assert bob.findings == [] and report.recalls_judged
    assert report.as_dict()["total"]["not_recalled"] == 1

    fixed = await run_audit(store, deduper=Deduper(), now=now, days=90, fix=True)
    run = fixed.fixed[ALICE]
    assert run.applied is not None
    assert {m.id for m in await store.list_memories(user_key=ALICE)} == {kayak, welsh}
    assert await store.undo_change(user_key=ALICE, change_id=run.applied.change_id) == 1


def test_not_recalled_judges_only_where_a_prompt_could_carry_the_memory() -> None:
    """A user who spoke only in channels for 90 days had no prompt that could carry a private
    memory: those are not judged (a --fix would otherwise retire all of them); standing
    memories (preferences, who the user is) are never flagged."""
    now = datetime(2026, 6, 1, tzinfo=UTC)
    old = now - timedelta(days=200)

    def memory(i: int, text: str, origin: str, kind: str = "fact") -> Memory:
        return Memory(
            id=i, user_key=ALICE, text=text, kind=kind, category="general",  # type: ignore[arg-type]
            source="remember", origin=origin, created_at=old, updated_at=old,  # type: ignore[arg-type]
        )  # fmt: skip

    memories = [
        memory(1, "The user owns a kayak.", "private"),
        memory(2, "The user is allergic to peanuts.", "private", kind="context"),
        memory(3, "The user sold a piano.", "shared"),
        memory(4, "The user runs the team's CI.", "shared"),
    ]
    recent = MemoryUse(recalls=1, last_recalled_at=now - timedelta(days=1))

    def flagged(uses: dict[int, MemoryUse]) -> list[int]:
        audit = audit_memories(
            ALICE, memories, deduper=Deduper(), now=now, days=90, secrets=None, uses=uses,
            recall_log_started=now - timedelta(days=400),
        )  # fmt: skip
        return [f.memory_id for f in audit.findings if f.rule == "not_recalled"]

    assert flagged({4: recent}) == [3]  # channels only: no private memory judged
    assert flagged({1: recent}) == [3, 4]  # a DM prompt: both origins judged, 2 is standing
    assert flagged({}) == []  # away: nothing judged


async def test_copies_of_a_sentence_said_in_several_places_are_no_duplicates(
    store: Store,
) -> None:
    # Said in a group DM, then word for word in a public channel: one copy each place.
    tabs = "The user prefers tabs over spaces."
    group = Place("slack", "group_dm", "T1", "G1")
    public = Place("slack", "public_channel", "T1", "C1")
    first = await store.add(user_key=ALICE, memory=NewMemory(tabs, place=group), dedupe=Deduper())
    second = await store.add(user_key=ALICE, memory=NewMemory(tabs, place=public), dedupe=Deduper())
    assert (first.status, second.status) == ("added", "added") and first.id != second.id
    report = await run_audit(store, deduper=Deduper(), now=utcnow(), fix=True)
    assert report.users[0].findings == [] and ALICE not in report.fixed
    assert {m.place for m in await store.export(user_key=ALICE)} == {group, public}
