"""The allow-lists (core.chat.controls) at the Slack surfaces besides messages and commands:
the Home tab, the Messages tab greeting and feedback; and feedback values checked before
anything is stored (only the rater's own answered message can be rated)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bots.slack_bot.blocks import FEEDBACK_ACTION, feedback_blocks, parse_feedback
from bots.slack_bot.home import MODE
from core.chat.controls import NOT_ENABLED
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, JsonDict
from tests.slack_helpers import (
    PREFERENCE,
    RunningSlackBot,
    bot_posts,
    key,
    running_bot,
    settle,
    slack_settings,
)

SINCE = datetime(2020, 1, 1, tzinfo=UTC)


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as fake:
        yield fake


async def test_an_outsiders_home_tab_shows_no_memory_and_takes_no_click(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db", allowed_users=key("U2"))
    async with running_bot(settings) as running:
        service = running.runtime.service
        await service.remember(user_key=key("U1"), text=PREFERENCE)  # kept from before
        event = slack.events.app_home_opened(user="U1", tab="home")
        assert (await slack.send_event(running.events_url, event)).status == 200
        await slack.wait_until(lambda: "U1" in slack.home_views, what="the Home tab")
        await settle(running)
        view = slack.home_views["U1"]
        assert json.dumps(view).count(NOT_ENABLED) == 1
        assert "bullet points" not in json.dumps(view) and "button" not in json.dumps(view)

        # A forged "Turn memory off" click on an outsider's tab changes nothing.
        metadata = json.dumps({"owner": "U1", "offset": 0, "query": ""})
        forged = {"id": view["id"], "type": "home", "private_metadata": metadata}
        payload = slack.events.view_action(forged, MODE, "off", user="U1")
        assert (await slack.send_interaction(running.events_url, payload)).status == 200
        await settle(running)
        assert await running.runtime.store.get_mode(user_key=key("U1")) == "on"
        assert "bullet points" not in json.dumps(slack.home_views["U1"])

        # Someone on the list sees their page.
        insider = slack.events.app_home_opened(user="U2", tab="home")
        assert (await slack.send_event(running.events_url, insider)).status == 200
        await slack.wait_until(lambda: "U2" in slack.home_views, what="the insider's tab")
        assert NOT_ENABLED not in json.dumps(slack.home_views["U2"])


async def test_a_team_outside_the_list_gets_no_home_tab_and_no_greeting(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db", allowed_slack_teams="T0OTHER")
    async with running_bot(settings) as running:
        await running.runtime.service.remember(user_key=key("U1"), text=PREFERENCE)
        for tab in ("messages", "home"):
            event = slack.events.app_home_opened(user="U1", tab=tab)
            assert (await slack.send_event(running.events_url, event)).status == 200
        await slack.wait_until(lambda: "U1" in slack.home_views, what="the Home tab")
        await settle(running)
    assert "bullet points" not in json.dumps(slack.home_views["U1"])
    assert bot_posts(slack, "D1") == []  # no greeting
    assert slack.calls("assistant.threads.setSuggestedPrompts") == []


def click(slack: FakeSlack, value: str, *, user: str, message_ts: str) -> JsonDict:
    return slack.events.block_actions(FEEDBACK_ACTION, value, user=user, message_ts=message_ts)


async def ratings(running: RunningSlackBot) -> list[tuple[int, int]]:
    store = running.runtime.store
    return [(r.positive, r.negative) for r in await store.feedback_report(since=SINCE)]


async def test_feedback_rates_only_the_raters_own_answer_inside_the_lists(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db", allowed_users=key("U1"))
    async with running_bot(settings) as running:
        url = running.events_url
        asked = slack.events.message("rate my answer", user="U1")
        await slack.send_event(url, asked)
        await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="the answer")
        await settle(running)
        (answer,) = bot_posts(slack, "D1")

        def sent(value: str, user: str = "U1") -> JsonDict:
            payload = click(slack, value, user=user, message_ts=answer["ts"])
            payload["channel"] = {"id": "D1", "name": "d1"}
            payload["container"]["channel_id"] = "D1"
            return payload

        hostile = [
            f"up:U1:{asked['ts']}" + "x" * 3000,  # past Slack's 2,000
            f"up:U1\x00:{asked['ts']}",  # a control character
            "up:U1:nan",
            "up:U1:1700000000.000001",  # no such message
        ]
        for value in hostile:
            assert (await slack.send_interaction(url, sent(value))).status == 200
        await settle(running)
        assert await ratings(running) == []

        # U2 forges a value naming themselves on U1's message: not their message, not stored
        # (and U2 is outside the allow-list: told so).
        forged = sent(f"up:U2:{asked['ts']}", user="U2")
        assert (await slack.send_interaction(url, forged)).status == 200
        reply = await slack.wait_for_response(forged["response_url"])
        assert reply["text"] == NOT_ENABLED
        assert await ratings(running) == []

        # The asker's real click is stored.
        up = feedback_blocks(asker="U1", answers_ts=asked["ts"])[0]["elements"][0]
        value = up["positive_button"]["value"]
        assert (await slack.send_interaction(url, sent(value))).status == 200
        assert await ratings(running) == [(1, 0)]


def test_feedback_values_are_exactly_what_the_buttons_write() -> None:
    ts = "1700000000.000100"
    assert parse_feedback(f"up:U1:{ts}") == (True, "U1", ts)
    assert parse_feedback(f"down:W2ABC:{ts}") == (False, "W2ABC", ts)
    for bad in (f"up:U1:{ts}\n", f"up:u1:{ts}", "up:U1:1e400", "sideways:U1:1.2", "x" * 2001):
        assert parse_feedback(bad) is None
