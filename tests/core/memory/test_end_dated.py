"""Consolidation's "end dated facts" (issue 37): undated facts whose text names their end get
their days, past ones are told as past, and Claude's "end" closes a time-bound fact a later
memory shows is over; one undoable change listed in the tidy note, recall still finding
them. Both backends, the fake Anthropic API."""

from __future__ import annotations

import calendar
import json
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from core.memory import replies
from core.memory.cleanup import Cleaner, PlanOperation, PlanOutput, check_plan
from core.memory.consolidation import Consolidator, Window
from core.memory.profile import in_profile, listed_text
from core.memory.tidy_notes import last_tidy, undo_tidy
from core.rules.cleanup_ops import MergeOp
from core.rules.when import as_past, ended, told_as_past
from core.store.seams import Store
from core.types import Memory, NewMemory, utcnow
from tests.cleanup_helpers import plan_op, prompt_rows
from tests.fakes.anthropic_server import FakeAnthropic, request_kind, running_fake_anthropic
from tests.loop_helpers import harness

ALICE = "slack:T1:UALICE"
LEAD = "The user leads the platform team until the migration is done."
DONE = "The migration to PostgreSQL was finished on {}."
LED = "The user led the platform team until the migration finished on {}."
JAZZ = "The user likes jazz."
BIRTHDAY = "The user's birthday is on 3 March."
NOW = utcnow()
TODAY = NOW.date()


def at(days_ago: int) -> datetime:
    return datetime.combine(TODAY - timedelta(days=days_ago), datetime.min.time(), UTC)


def day_month(d: date) -> str:
    return f"{d.day} {calendar.month_name[d.month]}"


def ender(body: dict[str, Any]) -> str:
    """A careful model: ends the platform-team lead on the day the migration finished."""
    if request_kind(body) != "extract":
        return "Noted."
    rows = prompt_rows(body)
    ids = {r["text"]: r["id"] for r in rows}
    done = next((r for r in rows if r["text"].startswith("The migration to")), None)
    if LEAD not in ids or done is None:
        return json.dumps({"operations": []})
    until = done["date"]
    return json.dumps(
        {"operations": [plan_op("end", [ids[LEAD]], until=until, text=LED.format(until))]}
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(responder=ender) as f:
        yield f


def consolidator(store: Store, model: object) -> Consolidator:
    cleaner = Cleaner(store=store, model=model, batch_size=25, max_batches=5)  # type: ignore[arg-type]
    return Consolidator(
        store=store,
        cleaner=cleaner,
        enabled=True,
        window=Window.parse("00:00-00:00"),
        daily_tokens=1_000_000,
        min_memories=2,
        clock=lambda: NOW,
    )


async def test_a_night_ends_dated_facts_as_one_undoable_change(
    fake: FakeAnthropic, db_url: str
) -> None:
    leave_end = TODAY + timedelta(days=40)
    trip = "The user is travelling to Singapore next week."
    leave = f"The user is on leave until {day_month(leave_end)}."
    lisbon_days = (TODAY - timedelta(days=15), TODAY - timedelta(days=13))
    lisbon = f"The user is in Lisbon from {lisbon_days[0]} to {lisbon_days[1]}."
    done = DONE.format(TODAY - timedelta(days=10))
    seeded = [
        NewMemory(text=trip, created_at=at(40), source="reflection"),  # stored before dates
        NewMemory(text=leave, created_at=at(4), source="remember"),
        NewMemory(
            text=lisbon,
            created_at=at(20),
            valid_from=lisbon_days[0],
            valid_until=lisbon_days[1],
        ),
        NewMemory(text=LEAD, kind="context", created_at=at(60), source="reflection"),
        NewMemory(text=done, created_at=at(10), source="reflection"),
        NewMemory(text=BIRTHDAY, created_at=at(60), source="reflection"),
        NewMemory(text=JAZZ, kind="preference", created_at=at(60), source="reflection"),
    ]
    async with harness(fake, db_url) as h:
        await h.store.add_many(user_key=ALICE, memories=seeded, dedupe=None)
        before = {m.text: m for m in await h.store.export(user_key=ALICE)}
        report = await consolidator(h.store, h.model).run_night()
        assert report is not None and report.failed == 0
        (night,) = report.users
        assert night.change_id is not None and (night.tidied, night.dated) == (4, 4)
        # Claude saw the dated memory's last day, and was asked once
        (request,) = fake.requests_of("extract")
        assert f'"until": "{lisbon_days[1]}"' in str(request.body["messages"][0]["content"])
        after = {m.text: m for m in await h.store.export(user_key=ALICE)}
        # the trip: dated against the day it was stored, then told as past
        (told,) = [m for m in after.values() if "Singapore" in m.text]
        assert told.text.startswith("The user was travelling to Singapore in the week of ")
        assert told.valid_until is not None and told.valid_until < TODAY
        assert told.created_at == before[trip].created_at and told.source == "reflection"
        # the leave: given its absolute last day, still current, kept as /remember's
        new_leave = after[f"The user is on leave until {leave_end}."]
        assert (new_leave.valid_from, new_leave.valid_until) == (None, leave_end)
        assert new_leave.source == "remember" and in_profile(new_leave, TODAY)
        # the past stay in Lisbon: told as past, its days kept
        was = after[as_past(lisbon)]
        assert (was.valid_from, was.valid_until) == lisbon_days
        # Claude's end: the lead ended on the day the migration finished
        led = after[LED.format(TODAY - timedelta(days=10))]
        assert led.valid_until == TODAY - timedelta(days=10) and led.kind == "context"
        # the rest untouched (a birthday is a yearly day, not an end)
        assert {BIRTHDAY, JAZZ, done} <= set(after) and len(after) == len(seeded)
        # ended facts are out of the profile, listed as past, and recall still finds them
        for m in (told, was, led):
            assert not in_profile(m, TODAY)
            assert listed_text(m, TODAY) == f"(past) {m.text}"
        found = await h.store.search(user_key=ALICE, query="When was I in Singapore?", k=6)
        assert told.id in [s.memory.id for s in found]
        # told in the tidy note, as /memory and the Home tab say it
        note = await last_tidy(h.store, user_key=ALICE, now=NOW)
        assert note is not None and (note.change_id, note.tidied, note.dated) == (
            night.change_id,
            4,
            4,
        )
        assert "4 of them dated facts given their end" in replies.tidied(4, dated=note.dated)
        # a second look changes nothing: what was dated stays as it is
        assert consolidator(h.store, h.model).end_dated(list(after.values()), NOW) == []
        # one undo puts every memory back as it was, undated
        assert await undo_tidy(h.store, user_key=ALICE, change_id=night.change_id) == 4
        restored = {m.text: m for m in await h.store.export(user_key=ALICE)}
        assert set(restored) == set(before)
        assert restored[trip].valid_until is None and restored[trip].id == before[trip].id


async def test_nothing_to_end_makes_no_change(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        await h.store.add_many(
            user_key=ALICE,
            memories=[
                NewMemory(text=JAZZ, created_at=at(3)),
                NewMemory(text=BIRTHDAY, created_at=at(3)),
            ],
            dedupe=None,
        )
        report = await consolidator(h.store, h.model).run_night()
        assert report is not None
        assert [(u.change_id, u.tidied, u.dated) for u in report.users] == [(None, 0, 0)]
        assert await last_tidy(h.store, user_key=ALICE, now=NOW) is None


def memory(mid: int, text: str, *, days_ago: int = 30, until: date | None = None) -> Memory:
    made = at(days_ago)
    return Memory(
        mid, ALICE, text, "fact", "general", "reflection", "private", made, made, valid_until=until
    )


def test_end_dated_skips_what_the_plan_changes_and_flags_remember() -> None:
    trip = memory(1, "The user is travelling to Lisbon tomorrow.")
    kept = memory(2, "The user is on call next week.")
    mine = Memory(
        3, ALICE, "The report is due tomorrow.", "fact", "general", "remember", "private",
        at(30), at(30),
    )  # fmt: skip
    night = Consolidator(
        store=None,  # type: ignore[arg-type]
        cleaner=None,  # type: ignore[arg-type]
        enabled=True,
        window=Window.parse("00:00-00:00"),
        daily_tokens=1,
    )
    planned = night.end_dated([trip, kept, mine], NOW, skip={2})
    assert [p.op.ids for p in planned if isinstance(p.op, MergeOp)] == [(1,), (3,)]
    assert [p.user_added for p in planned] == [(), (3,)]
    assert all("date #" in p.describe({1: trip.text, 3: mine.text}) for p in planned)


def plan(ids: tuple[int, ...] = (7,), **fields: Any) -> PlanOutput:
    return PlanOutput(operations=[PlanOperation(**plan_op("end", list(ids), **fields))])


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"until": ""}, "no day"),
        ({"until": "2026-13-01"}, "no date"),
        ({"until": "yesterday"}, "words"),
        ({"until": (TODAY + timedelta(days=1)).isoformat()}, "in the future"),
        ({"until": (TODAY - timedelta(days=400)).isoformat()}, "before it was stored"),
        ({"until": TODAY.isoformat(), "text": "x" * 300}, "too long"),
        ({"until": TODAY.isoformat(), "ids": (99,)}, "another memory, not in the batch"),
        ({"until": TODAY.isoformat(), "ids": (7, 8)}, "two memories"),
    ],
)
def test_claudes_end_is_checked(fields: dict[str, Any], why: str) -> None:
    batch = [memory(7, LEAD), memory(8, JAZZ)]
    assert check_plan(plan(**fields), batch, today=TODAY) is None, why


def test_claudes_end_of_a_dated_memory_is_refused_and_a_good_one_kept() -> None:
    dated = memory(7, LEAD, until=TODAY - timedelta(days=1))
    assert check_plan(plan(until=TODAY.isoformat()), [dated], today=TODAY) is None
    # no text given: the memory told as past; control characters removed
    (kept,) = check_plan(plan(until=TODAY.isoformat()), [memory(7, LEAD)], today=TODAY) or []
    assert isinstance(kept.op, MergeOp) and kept.op.days == (None, TODAY)
    assert kept.op.text == as_past(LEAD)
    cleaned = plan(until=TODAY.isoformat(), text="The user led the team\x00 until today.")
    (op,) = check_plan(cleaned, [memory(7, LEAD)], today=TODAY) or []
    assert isinstance(op.op, MergeOp) and "\x00" not in op.op.text


@pytest.mark.parametrize(
    ("text", "stored", "until", "result"),
    [
        ("The user is in Rome tomorrow.", date(2026, 11, 2), None, "The user was in Rome on"),
        ("The user's anniversary is on 3 March.", date(2026, 11, 2), None, None),
        ("The user was born on 3 March.", date(2026, 11, 2), None, None),
        ("The user is starting at Google next month.", date(2026, 11, 2), None, None),
        ("The user likes jazz.", date(2026, 11, 2), None, None),
        ("", date(2026, 11, 2), None, None),
        ("next week " * 500, date(2026, 11, 2), None, "in the week of 2026-11-09"),
        ("Ünïcode 🍕 \x00 tomorrow", date(2026, 11, 2), None, "Ünïcode"),
        ("The user was in Rome.", date(2026, 11, 2), date(2026, 11, 3), None),
        ("Rome, until then.", date(2026, 11, 2), date(2026, 11, 3), None),
    ],
)
def test_ended_rule(text: str, stored: date, until: date | None, result: str | None) -> None:
    got = ended(text, valid_from=None, valid_until=until, stored=stored, today=date(2026, 12, 5))
    if result is None:
        assert got is None
    else:
        assert got is not None and got.text.startswith(result)
        assert got.valid_until is not None and got.valid_until < date(2026, 12, 5)


def test_as_past_leaves_past_text_alone() -> None:
    text = "The user was travelling to Singapore and has a visa."
    assert told_as_past(text) and as_past(text) == text
    assert not told_as_past("The user is travelling; it was planned.")
    assert as_past("The user is in Rome.") == "The user was in Rome."


def test_a_pending_plan_keeps_the_days_of_an_end() -> None:
    """A ``/memories cleanup`` plan waits for the user's approval as JSON: an "end" keeps its
    days there (else its approval would write the past sentence undated)."""
    from core.memory.cleanup import CleanupRun, PlannedOp
    from core.memory.cleanup_review import run_from_json, run_to_json

    end = MergeOp((7,), as_past(LEAD), "context", "general", (None, TODAY))
    merge = MergeOp((8, 9), JAZZ, "preference", "general")
    run = CleanupRun(user_key=ALICE, before=3)
    run.planned = [PlannedOp(end, "over", ()), PlannedOp(merge, "same", ())]
    back = run_from_json(run_to_json(run))
    assert [p.op for p in back.planned] == [end, merge]
