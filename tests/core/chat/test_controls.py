"""Team controls: allow-lists, daily caps (no Claude call past them), usage recording."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from bots.cli import app
from core.chat.controls import Controls, Place
from core.errors import LimitReached
from core.settings import load_settings
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import dm, harness, memories_reply

ALICE, BOB, CAROL = "slack:T1:UA", "slack:T1:UB", "slack:T2:UC"


def invoke(db: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["--db", str(db), *args])


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as f:
        yield f


def test_allow_lists() -> None:
    open_ = Controls(load_settings(), usage=None)  # type: ignore[arg-type]
    assert open_.allows(Place("slack", ALICE, "T9", "C9"))
    c = Controls(
        load_settings(
            allowed_slack_teams=("T1",),
            allowed_slack_channels=("C1",),
            allowed_discord_guilds=("G1",),
        ),
        usage=None,  # type: ignore[arg-type]
    )
    assert c.allows(Place("slack", ALICE, "T1", "C1"))
    assert not c.allows(Place("slack", ALICE, "T1", "C2"))  # channel outside the list
    assert c.allows(Place("slack", ALICE, "T1", "D1", private=True))  # DMs in the team
    assert not c.allows(Place("slack", CAROL, "T2", "D2", private=True))  # other workspace
    assert c.allows(Place("discord", "discord:1", "G1", "any"))  # no Discord channel list
    assert not c.allows(Place("discord", "discord:1", "G2", "any"))
    users = Controls(load_settings(allowed_users=("cli:alice",)), usage=None)  # type: ignore[arg-type]
    assert users.allows(Place("cli", "cli:alice"))
    assert not users.allows(Place("cli", "cli:mallory"))


def test_comma_lists_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SELFMIND_ALLOWED_SLACK_CHANNELS", "C1, C2,,")
    assert load_settings().allowed_slack_channels == ("C1", "C2")


async def test_usage_rows_match_the_api_exactly(fake: FakeAnthropic, db_path: Path) -> None:
    async with harness(fake, db_path) as h:
        fake.enqueue(
            memories_reply(("The user likes tea.", "preference", "general")), kind="extract"
        )
        await h.say(dm(ALICE, "I like tea", workspace="T1"))
        await h.say(dm(ALICE, "and biscuits", workspace="T1"))
        await h.say(dm(CAROL, "hello", workspace="T2"))
        await h.reflector.drain(10)
        since = datetime(2000, 1, 1, tzinfo=UTC)
        by_kind = {r.key: r for r in await h.store.usage_report(since=since, by="kind")}
        by_user = {r.key: r for r in await h.store.usage_report(since=since, by="user")}
        by_space = {r.key: r for r in await h.store.usage_report(since=since, by="workspace")}
    t = fake.totals
    assert by_kind["chat"].calls == 3 and by_kind["reflection"].calls == 3
    for field in (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ):
        assert sum(getattr(r, field) for r in by_kind.values()) == getattr(t, field), field
        assert sum(getattr(r, field) for r in by_user.values()) == getattr(t, field), field
        assert sum(getattr(r, field) for r in by_space.values()) == getattr(t, field), field
    assert by_user[ALICE].calls == 4 and by_user[CAROL].calls == 2
    assert by_space["T1"].calls == 4 and by_space["T2"].calls == 2
    # The persona block is cached: later chat calls read it from the cache.
    assert by_kind["chat"].cache_read_input_tokens > 0
    assert 0 < by_kind["chat"].cache_read_share < 1


async def test_daily_message_cap_makes_no_call(fake: FakeAnthropic, db_path: Path) -> None:
    async with harness(fake, db_path, user_daily_messages=2) as h:
        await h.say(dm(ALICE, "one", workspace="T1"))
        await h.say(dm(ALICE, "two", workspace="T1"))
        await h.reflector.drain(10)
        before = len(fake.requests)
        with pytest.raises(LimitReached) as err:
            await h.say(dm(ALICE, "three", workspace="T1"))
        assert "daily limit of 2 messages" in err.value.user_message
        assert "resets at 00:00 UTC" in err.value.user_message
        assert len(fake.requests) == before
        turns = await h.store.recent_turns(conversation_key=f"dm:{ALICE}", limit=10)
        assert "three" not in [t.text for t in turns]
        # Others are not affected, and memory commands still work.
        await h.say(dm(BOB, "one", workspace="T1"))
        assert (await h.service.remember(user_key=ALICE, text="The user likes tea.")).id
        await h.reflector.drain(10)


async def test_workspace_token_cap(fake: FakeAnthropic, db_path: Path) -> None:
    async with harness(fake, db_path, workspace_daily_tokens=50) as h:
        await h.say(dm(ALICE, "a long enough first message to use tokens", workspace="T1"))
        await h.reflector.drain(10)
        with pytest.raises(LimitReached, match="this workspace's daily limit of 50 tokens"):
            await h.say(dm(BOB, "hi", workspace="T1"))
        await h.say(dm(CAROL, "hi", workspace="T2"))  # another workspace
        await h.reflector.drain(10)


async def test_cap_resets_next_day(fake: FakeAnthropic, db_path: Path) -> None:
    async with harness(fake, db_path, user_daily_messages=1) as h:
        await h.say(dm(ALICE, "today"))
        await h.reflector.drain(10)
        tomorrow = datetime.now(UTC) + timedelta(days=1)
        await h.loop.controls.check_limits(user_key=ALICE, workspace=None, now=tomorrow)
        with pytest.raises(LimitReached):
            await h.loop.controls.check_limits(user_key=ALICE, workspace=None)


async def test_usage_cli_report(fake: FakeAnthropic, db_path: Path) -> None:
    async with harness(fake, db_path) as h:
        await h.say(dm(ALICE, "hello", workspace="T1"))
        await h.say(dm(ALICE, "again", workspace="T1"))
        await h.reflector.drain(10)
    result = await asyncio.to_thread(invoke, db_path, "usage", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    kinds = {r["kind"]: r for r in report["rows"]}
    assert kinds["chat"]["calls"] == 2 and kinds["reflection"]["calls"] == 2
    assert report["total"]["input_tokens"] == fake.totals.input_tokens
    assert report["total"]["cache_read_input_tokens"] == fake.totals.cache_read_input_tokens
    by_user = await asyncio.to_thread(invoke, db_path, "usage", "--by", "user", "--json")
    assert [r["user"] for r in json.loads(by_user.stdout)["rows"]] == [ALICE]
    bad = await asyncio.to_thread(invoke, db_path, "usage", "--since", "yesterday")
    assert bad.exit_code == 2 and "--since" in bad.stderr
