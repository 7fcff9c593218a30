"""``selfmind channels ...`` and ``selfmind memories ... --channel``: a channel's own memory
from the command line, on both backends; a change reaches a running bot's next message
without a restart; ``db copy`` carries it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bots.cli import app
from core.memory.service import is_token, new_token
from core.memory.team import TeamMemory
from core.rules.dedupe import Deduper
from core.runtime import open_store
from core.store.postgres.admin import copy_sqlite_to_postgres
from core.types import Place
from tests.conftest import fresh_pg_database, run_sync
from tests.core.memory.test_team import PG16, QUESTION, said, teach, turn
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import harness

runner = CliRunner()
C1 = "slack:T1:C1"


def cli(db: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--db", db, *args])
    return result.exit_code, result.stdout, result.stderr


def seen(db: str, *places: Place) -> None:
    async def work() -> None:
        store = await open_store(db)
        try:
            for place in places:
                await store.see_channel(place=place)
        finally:
            await store.close()

    run_sync(work())


PUBLIC = Place(platform="slack", kind="public_channel", workspace="T1", channel="C1")
GUILD = Place(platform="discord", kind="private_channel", workspace="9", channel="8")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=50) as f:
        yield f


def test_channels_list_memory_remember_list_forget_undo(db_url: str) -> None:
    seen(db_url, PUBLIC, GUILD)
    code, out, _ = cli(db_url, "channels", "list", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["key"], r["memory"], r["entries"], r["kind"]) for r in rows] == [
        ("discord:9:8", "off", 0, "private_channel"),
        (C1, "off", 0, "public_channel"),
    ]
    code, out, _ = cli(db_url, "channels", "memory", "on", C1, "--allow", "slack:T1:UALICE")
    assert code == 0 and "is on" in out
    code, out, _ = cli(
        db_url, "memories", "remember", "--channel", C1, "we ship on Fridays", "--json"
    )
    added = json.loads(out)
    assert (
        code == 0 and added["status"] == "added" and added["text"] == "The team ships on Fridays."
    )
    code, out, _ = cli(db_url, "memories", "list", "--channel", C1, "--json")
    [entry] = json.loads(out)
    assert entry["id"] == added["id"] and entry["said_by"] == "cli"
    code, out, _ = cli(db_url, "memories", "export", "--channel", C1)
    assert code == 0 and json.loads(out)["text"] == "The team ships on Fridays."
    # Another channel's entry id, or a user's, is not this channel's.
    code, _, err = cli(db_url, "memories", "forget", "--channel", "discord:9:8", str(added["id"]))
    assert code == 1 and "no such memory" in err
    code, out, _ = cli(db_url, "memories", "forget", "--channel", C1, str(added["id"]), "--json")
    assert code == 0
    token = json.loads(out)["undo"]
    assert json.loads(cli(db_url, "memories", "list", "--channel", C1, "--json")[1]) == []
    code, out, _ = cli(db_url, "channels", "undo", C1, token)
    assert code == 0 and "1 entries" in out
    assert len(json.loads(cli(db_url, "memories", "list", "--channel", C1, "--json")[1])) == 1
    [row] = [r for r in json.loads(cli(db_url, "channels", "list", "--json")[1]) if r["key"] == C1]
    assert (row["memory"], row["entries"], row["allowed"]) == ("on", 1, ["slack:T1:UALICE"])


def test_channel_commands_refuse_bad_input(db_url: str) -> None:
    seen(db_url, PUBLIC)
    for bad in ("", "slack:T1", "slack::C1", "irc:T1:C1", "slack:T1:C1\x00", "x" * 5000):
        code, _, err = cli(db_url, "memories", "list", "--channel", bad)
        assert code == 1 and "malformed channel key" in err, bad
    code, _, err = cli(db_url, "memories", "list", "--channel", "slack:T1:CNEVER")
    assert code == 1 and "no channel slack:T1:CNEVER" in err
    code, _, err = cli(db_url, "memories", "list", "--user", "alice", "--channel", C1)
    assert code == 2 and "one of them" in err
    code, _, err = cli(db_url, "channels", "memory", "maybe", C1)
    assert code == 2
    for text in ("", "x" * 500, "The deploy key is AKIAIOSFODNN7EXAMPLE."):
        code, _, err = cli(db_url, "memories", "remember", "--channel", C1, text)
        assert code == 1 and err.startswith("error:"), text
    code, _, err = cli(db_url, "channels", "undo", C1, "not-a-token")
    assert code == 1
    assert json.loads(cli(db_url, "memories", "list", "--channel", C1, "--json")[1]) == []


async def test_a_cli_change_reaches_the_running_bot_without_restart(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        await turn(h, fake, said("slack:T1:UALICE", "hello"))
        before = await turn(h, fake, said("slack:T1:UCAROL", QUESTION, author="Carol"))
        code, _, _ = await asyncio.to_thread(cli, db_url, "channels", "memory", "on", C1)
        assert code == 0
        code, _, _ = await asyncio.to_thread(
            cli, db_url, "memories", "remember", "--channel", C1, PG16
        )
        assert code == 0
        on = await turn(h, fake, said("slack:T1:UCAROL", QUESTION, author="Carol"))
        code, _, _ = await asyncio.to_thread(cli, db_url, "channels", "memory", "off", C1)
        off = await turn(h, fake, said("slack:T1:UCAROL", QUESTION, author="Carol"))
    assert PG16 not in before and PG16 in on and PG16 not in off


async def test_db_copy_carries_a_channels_memory(fake: FakeAnthropic, tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with harness(fake, path) as h:
        await teach(h, fake)
    with fresh_pg_database(migrated=False) as url:
        report = await copy_sqlite_to_postgres(f"sqlite:///{path}", url)
        assert report.ok, report
        async with harness(fake, url) as h:
            [info] = await h.store.list_channels()
            entries = await h.loop.team.entries(C1)
            text = await turn(h, fake, said("slack:T1:UCAROL", QUESTION, author="Carol"))
    assert (info.key, info.memory_on, info.entries) == (C1, True, 2)
    assert all(who is not None and who.said_by_name == "Alice" for _, who in entries)
    assert PG16 in text


def test_a_channel_export_carries_who_said_each_entry_and_import_restores_it(
    db_url: str, tmp_path: Path
) -> None:
    c2 = Place(platform="slack", kind="public_channel", workspace="T1", channel="C2")
    link = "https://t1.slack.com/archives/C1/p1733380000000100"
    said_at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)

    async def teach_c1() -> None:
        store = await open_store(db_url)
        try:
            for place in (PUBLIC, c2):
                await store.see_channel(place=place)
            team = TeamMemory(store, deduper=Deduper(), clock=lambda: said_at)
            await team.remember(
                channel_key=C1,
                text="We use PostgreSQL 16 for billing.",
                by="slack:T1:UALICE",
                by_name="Alice Ångström",
                link=link,
            )
            await team.remember(channel_key=C1, text="we deploy on Tuesdays", by="slack:T1:UBOB")
        finally:
            await store.close()

    run_sync(teach_c1())
    code, out, _ = cli(db_url, "memories", "export", "--channel", C1)
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(r["said_by"], r["said_by_name"], r["link"]) for r in lines] == [
        ("slack:T1:UALICE", "Alice Ångström", link),
        ("slack:T1:UBOB", None, None),
    ]
    assert {datetime.fromisoformat(r["said_at"]) for r in lines} == {said_at}
    exported = tmp_path / "c1.jsonl"
    exported.write_text(out, encoding="utf-8")
    code, out, err = cli(db_url, "memories", "import", str(exported), "--channel", "slack:T1:C2")
    assert code == 0, err
    code, out, _ = cli(db_url, "memories", "list", "--channel", "slack:T1:C2", "--json")
    restored = sorted(json.loads(out), key=lambda r: r["text"])
    assert [
        (r["text"], r["said_by"], r["said_by_name"], r["link"], r["changed_by"]) for r in restored
    ] == [
        ("The team deploys on Tuesdays.", "slack:T1:UBOB", None, None, "slack:T1:UBOB"),
        ("The team uses PostgreSQL 16 for billing.", "slack:T1:UALICE", "Alice Ångström", link,
         "slack:T1:UALICE"),
    ]  # fmt: skip
    assert {datetime.fromisoformat(r["said_at"]) for r in restored} == {said_at}
    # Imported again: the entries keep who said them, nothing doubles.
    code, out, _ = cli(db_url, "memories", "import", str(exported), "--channel", "slack:T1:C2")
    assert code == 0 and "imported 0, 2 already known" in out


def test_a_channel_import_refuses_a_bad_speaker_and_imports_nothing(
    db_url: str, tmp_path: Path
) -> None:
    seen(db_url, PUBLIC)
    good = {"text": "The team deploys on Tuesdays.", "said_at": "2026-12-01T09:30:00+00:00"}
    bad = [
        {**good, "said_at": "2026-12-01T09:30:00"},  # no timezone
        {**good, "said_at": None, "said_by": "slack:T1:U1"},  # who, but not when
        {**good, "link": "javascript:alert(1)"},
        {**good, "said_by_name": "Mallory\u202e\x00"},
        {**good, "said_by": "x" * 5000},
        {**good, "said_by": 42},
    ]
    for n, line in enumerate(bad, start=1):
        path = tmp_path / f"bad{n}.jsonl"
        path.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n", encoding="utf-8")
        code, _, err = cli(db_url, "memories", "import", str(path), "--channel", C1)
        assert code == 1 and "line 2:" in err, (line, err)
        assert json.loads(cli(db_url, "memories", "list", "--channel", C1, "--json")[1]) == []
    # A memory line's own fault and a speaker's fault are named together.
    path = tmp_path / "both.jsonl"
    path.write_text(json.dumps({"x": 1}) + "\n" + json.dumps(bad[0]) + "\n", encoding="utf-8")
    code, _, err = cli(db_url, "memories", "import", str(path), "--channel", C1)
    assert code == 1 and "line 1:" in err and "line 2:" in err


def test_users_lists_people_and_channels_list_lists_channels(db_url: str) -> None:
    seen(db_url, PUBLIC)
    assert cli(db_url, "memories", "remember", "--channel", C1, "we ship on Fridays")[0] == 0
    assert cli(db_url, "memories", "remember", "--user", "slack:T1:UALICE", "I like tea")[0] == 0
    code, out, _ = cli(db_url, "users", "--json")
    assert code == 0 and [u["user"] for u in json.loads(out)] == ["slack:T1:UALICE"]
    code, out, _ = cli(db_url, "users")
    assert code == 0 and "slack:T1:UALICE" in out and C1 not in out
    code, out, _ = cli(db_url, "channels", "list", "--json")
    assert [(c["key"], c["entries"]) for c in json.loads(out)] == [(C1, 1)]


def test_an_undo_token_is_never_read_as_an_option() -> None:
    tokens = [new_token() for _ in range(3000)]  # one in 64 started with "-" before
    assert all(is_token(t) and not t.startswith("-") for t in tokens)
