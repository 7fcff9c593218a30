"""Team memory on Slack, over signed HTTP requests and the fake Web API, on both backends:
``/memory channel on`` announced in the channel, a decision learned from a channel thread
in a later member's prompt there and nowhere else, ``/memories channel`` listing, forget
and undo announced, refusals to the caller only."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bots.slack_bot.app import RunningSlackBot
from tests.core.memory.test_team import OWNER, PG16, QUESTION, team_reply
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, JsonDict
from tests.loop_helpers import memories_reply
from tests.slack_helpers import bot_posts, command, running_bot, settle, slack_settings

C1 = "C0GENERAL"


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as fake:
        yield fake


@pytest.fixture
async def team_bot(
    slack: FakeSlack, claude: FakeAnthropic, db_url: str
) -> AsyncIterator[RunningSlackBot]:
    settings = slack_settings(
        slack,
        claude,
        db_url,
        channel_memory_admins="U1,U3",  # type: ignore[arg-type]
    )
    async with running_bot(settings) as running:
        yield running


async def announced(
    slack: FakeSlack, bot: RunningSlackBot, name: str, text: str, **kw: Any
) -> JsonDict:
    """Send a slash command whose answer is posted in the channel; return it."""
    started = time.monotonic()
    sent = await slack.send_slash_command(bot.events_url, name, text, **kw)
    assert (sent.status, sent.text) == (200, "")
    assert time.monotonic() - started < 3.0
    reply = await slack.wait_for_response(sent.sent["response_url"])
    assert reply.get("response_type") == "in_channel", reply
    return reply


async def ask(
    slack: FakeSlack,
    claude: FakeAnthropic,
    bot: RunningSlackBot,
    text: str,
    *,
    user: str,
    channel: str = C1,
    thread_ts: str | None = None,
    extract: Any = None,
) -> str:
    """Mention the bot (a DM when ``channel`` starts with D); the answered prompt's system."""
    claude.enqueue(Reply(text="Noted."), kind="chat")
    claude.enqueue(extract or memories_reply(), kind="extract")
    before = len(claude.requests_of("chat"))
    if channel.startswith("D"):
        event = slack.events.message(text, user=user, channel=channel)
    else:
        mention = slack.identity.mention
        event = slack.events.app_mention(
            f"{mention} {text}", user=user, channel=channel, thread_ts=thread_ts
        )
    await slack.send_event(bot.events_url, event)
    await slack.wait_until(lambda: len(claude.requests_of("chat")) > before, what="answer")
    await settle(bot)
    assert await bot.runtime.loop.reflector.drain(10)
    return "\n".join(str(b["text"]) for b in claude.requests_of("chat")[-1].body["system"])


async def test_team_memory_on_slack(
    slack: FakeSlack, claude: FakeAnthropic, team_bot: RunningSlackBot
) -> None:
    bot = team_bot
    # Not allowed (the operator named U1 and U3): refused to the caller, nothing changes.
    refused = await command(slack, bot, "/memory", "channel on", user="U2", channel=C1)
    assert "only the people" in refused["text"].lower()
    on = await announced(slack, bot, "/memory", "channel on", user="U1", user_name="alice")
    assert "alice turned this channel's memory on" in on["text"]
    root = slack.events.app_mention("x", user="U1", channel=C1)
    await ask(slack, claude, bot, "we use PostgreSQL 16 for billing; Bob owns the migration",
              user="U1", thread_ts=root["ts"], extract=team_reply(PG16, OWNER))  # fmt: skip
    later = await ask(slack, claude, bot, QUESTION, user="U3")  # a new thread, next day
    in_thread = await ask(slack, claude, bot, QUESTION, user="U3", thread_ts=root["ts"])
    elsewhere = await ask(slack, claude, bot, QUESTION, user="U3", channel="C0OTHER")
    direct = await ask(slack, claude, bot, QUESTION, user="U3", channel="D3")
    assert PG16 in later and OWNER in later and PG16 in in_thread
    assert PG16 not in elsewhere and PG16 not in direct
    listing = await command(slack, bot, "/memories", "channel", user="U2", channel=C1)
    assert "is on; 2 entries" in listing["text"] and PG16 in listing["text"]
    entry = next(line for line in listing["text"].splitlines() if PG16 in line)
    entry_id = entry.split()[0].lstrip("#")
    gone = await announced(
        slack, bot, "/memories", f"channel forget {entry_id}", user="U2", user_name="bea"
    )
    assert gone["text"].startswith(f"bea took #{entry_id}")
    token = gone["text"].rsplit("undo ", 1)[1].strip("`")
    assert PG16 not in await ask(slack, claude, bot, QUESTION, user="U3")
    # Another channel cannot use this channel's undo, nor see its entries.
    other = await command(slack, bot, "/memories", f"channel undo {token}", channel="C0OTHER")
    assert "another channel" in other["text"]
    assert (
        PG16 not in (await command(slack, bot, "/memories", "channel", channel="C0OTHER"))["text"]
    )
    back = await announced(slack, bot, "/memories", f"channel undo {token}", user="U3")
    assert "undid a change" in back["text"]
    assert PG16 in await ask(slack, claude, bot, QUESTION, user="U3")
    added = await announced(
        slack, bot, "/remember", "channel the runbook is in the Ops wiki", user="U2"
    )
    assert "“The runbook is in the Ops wiki.”" in added["text"]
    # A DM has no channel memory.
    in_dm = await command(slack, bot, "/memories", "channel", user="U2", channel="D2")
    assert "only for channels" in in_dm["text"]
    assert bot_posts(slack, C1)  # the answers went to the channel's threads


async def test_bad_channel_commands_are_refused_to_the_caller(
    slack: FakeSlack, claude: FakeAnthropic, team_bot: RunningSlackBot
) -> None:
    bot = team_bot
    for text, says in [
        ("channel forget 999", "no entry #999"),
        ("channel forget abc", "not an entry id"),
        ("channel add", "add what?"),
        ("channel add " + "x" * 500, "under 200 characters"),
        ("channel add The deploy key is AKIAIOSFODNN7EXAMPLE", "secrets are never stored"),
        ("channel undo \x00\x01", "already used"),
        ("channel correct 1", "correct how?"),
        ("channel frobnicate", "team memory:"),
    ]:
        reply = await command(slack, bot, "/memories", text, user="U2", channel=C1)
        assert says in reply["text"].lower(), (text, reply["text"])
    listing = await command(slack, bot, "/memories", "channel", user="U2", channel=C1)
    assert "is off" in listing["text"] and "0 entries" in listing["text"]
