"""Whose fact a memory is and when it is true, on both backends (``store``, ``db_url``):
another person's fact never stands in the user's profile and is recalled by relevance; a
dated memory leaves the profile after its last day and is shown as past; the migration
leaves existing memories about the user with no dates; import, export and reflection carry
the fields."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from core.chat.prompt import memory_block
from core.errors import ImportFormatError, MemoryInputError
from core.memory.profile import build_context, listed_text
from core.memory.recall import BM25Recaller
from core.memory.service import HYPOTHETICAL, MemoryService
from core.runtime import open_store
from core.store.seams import Store
from core.types import Memory, NewMemory
from tests.conftest import run_sync
from tests.core.store.test_upgrades import isolated, make_store, run_sql, url  # noqa: F401
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.loop_helpers import dm, harness, memory_lines

ALICE = "cli:alice"
SENT = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)  # a Saturday


def service_at(store: Store, when: datetime = SENT) -> MemoryService:
    return MemoryService(store, dedupe_threshold=0.7, clock=lambda: when)


async def context_on(store: Store, message: str, today: date) -> tuple[list[Memory], list[Memory]]:
    """The profile and the recalled memories for ``message`` on ``today``."""
    ctx = await build_context(
        store=store,
        recaller=BM25Recaller(store),
        user_key=ALICE,
        message=message,
        k=6,
        reach=None,
        budget_tokens=600,
        today=today,
    )
    return ctx.profile, [s.memory for s in ctx.recalled]


async def test_my_manager_prefers_short_emails_is_not_the_users_preference(store: Store) -> None:
    service = service_at(store)
    await service.remember(user_key=ALICE, text="I prefer concise answers")
    result = await service.remember(user_key=ALICE, text="my manager prefers short emails")
    assert result.text == "The user's manager prefers short emails."
    stored = await store.get(user_key=ALICE, memory_id=result.id)
    assert stored is not None
    assert (stored.about, stored.kind, stored.category) == ("the user's manager", "fact", "general")
    profile, recalled = await context_on(store, "How do I set up nginx?", SENT.date())
    assert [m.text for m in profile] == ["The user prefers concise answers."]
    # Asked about the manager, recall finds it, written as the manager's.
    profile, recalled = await context_on(store, "Draft an email to my manager", SENT.date())
    assert result.id in [m.id for m in recalled]
    assert result.id not in [m.id for m in profile]


async def test_a_named_colleagues_fact_is_theirs(store: Store) -> None:
    service = service_at(store)
    result = await service.remember(user_key=ALICE, text="Sarah on my team is vegetarian")
    assert result.text == "Sarah, on the user's team, is vegetarian."
    stored = await store.get(user_key=ALICE, memory_id=result.id)
    assert stored is not None and stored.about == "Sarah" and stored.kind == "fact"
    profile, recalled = await context_on(store, "Lunch ideas for Sarah?", SENT.date())
    assert profile == [] and [m.id for m in recalled] == [result.id]


@pytest.mark.parametrize(
    "text",
    ["if I had a dog I would call it Rex", "suppose I moved to Berlin", "what if I used vim"],
)
async def test_a_hypothetical_is_no_fact(store: Store, text: str) -> None:
    with pytest.raises(MemoryInputError) as err:
        await service_at(store).remember(user_key=ALICE, text=text)
    assert str(err.value) == HYPOTHETICAL
    assert await store.count(user_key=ALICE) == 0


async def test_a_trip_next_week_is_dated_and_becomes_past(store: Store) -> None:
    service = service_at(store)
    await service.remember(user_key=ALICE, text="I prefer concise answers")
    result = await service.remember(user_key=ALICE, text="I'm travelling to Singapore next week")
    assert result.text == (
        "The user is travelling to Singapore in the week of 2026-12-07 to 2026-12-13."
    )
    trip = await store.get(user_key=ALICE, memory_id=result.id)
    assert trip is not None
    assert (trip.valid_from, trip.valid_until) == (date(2026, 12, 7), date(2026, 12, 13))
    assert "next week" not in trip.text
    during, _ = await context_on(store, "What should I pack?", date(2026, 12, 10))
    assert trip.id in [m.id for m in during]
    # After its last day: out of the profile, recall still finds it, shown as past.
    after, recalled = await context_on(store, "When was I in Singapore?", date(2026, 12, 20))
    assert trip.id not in [m.id for m in after]
    assert [m.text for m in after] == ["The user prefers concise answers."]
    assert trip.id in [m.id for m in recalled]
    listed = listed_text(trip, date(2026, 12, 20))
    assert listed == (
        "(past) The user was travelling to Singapore in the week of 2026-12-07 to 2026-12-13."
    )
    assert listed_text(trip, date(2026, 12, 10)) == trip.text


async def test_the_prompt_shows_a_past_memory_as_past(store: Store) -> None:
    service = service_at(store)
    result = await service.remember(user_key=ALICE, text="I'm on call until 2026-12-08")
    trip = await store.get(user_key=ALICE, memory_id=result.id)
    assert trip is not None and trip.valid_until == date(2026, 12, 8) and trip.valid_from is None
    ctx = await build_context(
        store=store,
        recaller=BM25Recaller(store),
        user_key=ALICE,
        message="was I on call?",
        k=6,
        reach=None,
        budget_tokens=600,
        today=date(2026, 12, 20),
    )
    assert ctx.profile == []
    block = memory_block(ctx, now=datetime(2026, 12, 20, tzinfo=UTC), where="A DM.", user_name=None)
    assert '(past) "The user was on call until 2026-12-08."' in block


async def test_export_and_import_carry_about_and_dates(store: Store) -> None:
    service = service_at(store)
    await service.remember(user_key=ALICE, text="my wife is allergic to shellfish")
    await service.remember(user_key=ALICE, text="I'm travelling to Singapore next week")
    lines = [json.dumps(r) for r in await service.export(user_key=ALICE)]
    await service.import_lines(user_key="cli:bob", lines=lines)
    got = {m.text: m for m in await store.export(user_key="cli:bob")}
    wife = got["The user's wife is allergic to shellfish."]
    assert wife.about == "the user's wife" and wife.valid_until is None
    trip = next(m for m in got.values() if "Singapore" in m.text)
    assert (trip.about, trip.valid_from, trip.valid_until) == (
        None,
        date(2026, 12, 7),
        date(2026, 12, 13),
    )
    # A line without "about" gets the offline rule's; a bad day is the line's error.
    await service.import_lines(user_key="cli:carol", lines=['{"text": "my boss hates meetings"}'])
    [boss] = await store.export(user_key="cli:carol")
    assert (boss.text, boss.about) == ("The user's boss hates meetings.", "the user's boss")
    for bad in (
        '{"text": "The user is away.", "valid_until": "next week"}',
        '{"text": "The user is away.", "valid_from": "2026-12-09", "valid_until": "2026-12-01"}',
        '{"text": "The user is away.", "about": 7}',
        '{"text": "The user is away.", "about": "x\\u0000y"}',
    ):
        with pytest.raises(ImportFormatError):
            await service.import_lines(user_key="cli:dave", lines=[bad])
    assert await store.count(user_key="cli:dave") == 0


async def test_bulk_and_single_writes_keep_the_fields(store: Store) -> None:
    memory = NewMemory(
        text="Ravi, on the user's team, is in Tokyo from 2026-12-10 to 2026-12-14.",
        about="Ravi",
        valid_from=date(2026, 12, 10),
        valid_until=date(2026, 12, 14),
    )
    [bulk] = await store.add_many(user_key=ALICE, memories=[memory], dedupe=None)
    [one] = await store.add_many(
        user_key="cli:bob", memories=[memory], dedupe=service_at(store).deduper
    )
    for key, result in ((ALICE, bulk), ("cli:bob", one)):
        got = await store.get(user_key=key, memory_id=result.id)
        assert got is not None
        assert (got.about, got.valid_from, got.valid_until) == (
            "Ravi",
            date(2026, 12, 10),
            date(2026, 12, 14),
        )


def test_the_migration_leaves_old_memories_the_users_undated(
    backend: str,
    url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from core.store.migrations import migrations_of

    known = migrations_of("sqlite" if backend == "sqlite" else "postgres")
    name = "m022" if backend == "sqlite" else "m019"
    before = [n for _, n, _ in known].index(f"{name}_memory_about_dates")
    make_store(url, backend, monkeypatch, upto=before)
    run_sql(
        url,
        [
            "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source, origin,"
            " created_at, updated_at) SELECT uid, 'The user lives in Lisbon.', 'user lives lisbon',"
            " 'x', 1, 'context', 'general', 'remember', 'private', '2026-12-01T00:00:00+00:00',"
            " '2026-12-01T00:00:00+00:00' FROM users WHERE user_key = 'cli:alice'"
        ],
    )

    async def read() -> list[Memory]:
        store = await open_store(url, migrate=True)
        try:
            assert store.migrated[0] == f"{name}_memory_about_dates"
            return await store.list_memories(user_key=ALICE)
        finally:
            await store.close()

    [old] = run_sync(read())
    assert (old.text, old.about, old.valid_from, old.valid_until) == (
        "The user lives in Lisbon.",
        None,
        None,
        None,
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=50) as f:
        yield f


async def test_reflection_sets_about_and_dates(fake: FakeAnthropic, db_url: str) -> None:
    candidates = [
        {
            "text": "The user's manager, Sarah, prefers short emails.",
            "kind": "preference",
            "category": "communication",
            "supersedes": [],
            "about": "Sarah",
        },
        {
            "text": "The user is travelling to Singapore from 2026-12-10 to 2026-12-14.",
            "kind": "fact",
            "category": "general",
            "supersedes": [],
            "about": None,
            "valid_from": "2026-12-10",
            "valid_until": "2026-12-14",
        },
        {  # another person's fact worded as the user's: refused
            "text": "The user prefers long phone calls.",
            "kind": "preference",
            "category": "communication",
            "supersedes": [],
            "about": "Sarah",
        },
        {
            "text": "The user prefers tea.",
            "kind": "preference",
            "category": "general",
            "supersedes": [],
            "about": "the user",
            "valid_from": "soon",
            "valid_until": "2026-12-14",
        },
    ]
    async with harness(fake, db_url) as h:
        fake.enqueue(Reply(text="Noted."), kind="chat")
        fake.enqueue({"memories": candidates}, kind="extract")
        await h.say(dm(ALICE, "Sarah, my manager, likes short emails; I'm off to Singapore."))
        await h.reflector.drain(10)
        request = fake.requests_of("extract")[-1].body
        stored = {m.text: m for m in await h.store.export(user_key=ALICE)}
    system = json.dumps(request["system"])
    assert "message_time" in json.dumps(request["messages"])
    assert "about" in system and "valid_until" in system
    schema = json.dumps(request["output_config"]["format"]["schema"])
    assert '"about"' in schema and '"valid_from"' in schema
    sarah = stored["The user's manager, Sarah, prefers short emails."]
    # Another person's preference is never a standing one of the user's.
    assert (sarah.about, sarah.kind, sarah.category) == ("Sarah", "fact", "general")
    trip = stored["The user is travelling to Singapore from 2026-12-10 to 2026-12-14."]
    assert (trip.about, trip.valid_from, trip.valid_until) == (
        None,
        date(2026, 12, 10),
        date(2026, 12, 14),
    )
    assert "The user prefers long phone calls." not in stored
    tea = stored["The user prefers tea."]
    assert (tea.about, tea.valid_from, tea.valid_until) == (None, None, date(2026, 12, 14))


async def test_another_persons_fact_stays_out_of_the_prompts_profile(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        service = service_at(h.store)
        await service.remember(user_key=ALICE, text="I prefer concise answers")
        await service.remember(user_key=ALICE, text="my manager prefers short emails")
        await service.remember(user_key=ALICE, text="I'm travelling to Singapore next week")
        h.loop.clock = lambda: datetime(2026, 12, 20, 9, 0, tzinfo=UTC)
        fake.enqueue(Reply(text="Sure."), kind="chat")
        fake.enqueue({"memories": []}, kind="extract")
        await h.say(dm(ALICE, "How do I set up nginx?"))
        await h.reflector.drain(10)
        system = fake.requests_of("chat")[-1].body["system"]
    profile = next(b["text"] for b in system if "<profile>" in b["text"])
    assert memory_lines(profile) == ["The user prefers concise answers."]


def test_listings_show_a_past_memory_as_past(db_path: Path, tmp_path: Path) -> None:
    from tests.bots.test_cli import cli

    dump = tmp_path / "in.jsonl"
    lines = [
        {"text": "The user is on call until 2026-01-04.", "valid_until": "2026-01-04"},
        {"text": "The user's manager prefers short emails.", "about": "the user's manager"},
    ]
    dump.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    code, _, err = cli(db_path, "memories", "import", "--user", "alice", str(dump))
    assert code == 0, err
    code, out, _ = cli(db_path, "memories", "list", "--user", "alice")
    assert "(past) The user was on call until 2026-01-04." in out
    assert "The user's manager prefers short emails." in out
    code, out, _ = cli(db_path, "memories", "list", "--user", "alice", "--json")
    rows = {r["text"]: r for r in json.loads(out)}
    assert rows["The user is on call until 2026-01-04."]["valid_until"] == "2026-01-04"
    assert rows["The user's manager prefers short emails."]["about"] == "the user's manager"


async def test_another_persons_fact_never_merges_with_the_users(store: Store) -> None:
    service = service_at(store)
    own = await service.remember(user_key=ALICE, text="I prefer short emails")
    boss = await service.remember(user_key=ALICE, text="my manager prefers short emails")
    # Neither a more specific version of the user's preference nor a duplicate of it.
    assert boss.status == "added" and boss.superseded == ()
    again = await service.remember(user_key=ALICE, text="I prefer short emails")
    assert again.status == "duplicate" and again.id == own.id
    texts = {m.text for m in await store.list_memories(user_key=ALICE)}
    assert texts == {"The user prefers short emails.", "The user's manager prefers short emails."}
    # The same through an import, both ways round.
    lines = [
        '{"text": "my wife is vegetarian"}',
        '{"text": "I am vegetarian"}',
        '{"text": "The user\'s wife is vegetarian."}',
    ]
    result = await service.import_lines(user_key="cli:bob", lines=lines)
    assert (result.added, result.duplicates, result.superseded) == (2, 1, 0)
    bob = {(m.text, m.about) for m in await store.list_memories(user_key="cli:bob")}
    assert bob == {
        ("The user's wife is vegetarian.", "the user's wife"),
        ("The user is vegetarian.", None),
    }


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("  the user ", None),
        ("User", None),
        ("null", None),
        ("Sarah", "Sarah"),
        ("the user's manager\n\u0000", "the user's manager"),
        ("x" * 101, None),
    ],
)
def test_a_reflections_about_is_cleaned(raw: str | None, expected: str | None) -> None:
    from core.memory.reflection import candidate_about

    assert candidate_about(raw) == expected


@pytest.mark.parametrize(
    ("first", "last", "expected"),
    [
        ("2026-12-10", "2026-12-14", (date(2026, 12, 10), date(2026, 12, 14))),
        ("2026-12-10T00:00:00Z", None, (date(2026, 12, 10), None)),
        ("next week", "2026-12-14", (None, date(2026, 12, 14))),
        ("2026-02-30", "", (None, None)),
        ("2026-12-14", "2026-12-10", (None, None)),  # ends before it begins
        ("\u202e", "9" * 5000, (None, None)),
    ],
)
def test_a_reflections_dates_are_checked(
    first: str | None, last: str | None, expected: tuple[date | None, date | None]
) -> None:
    from core.memory.reflection import candidate_days

    assert candidate_days(first, last) == expected
