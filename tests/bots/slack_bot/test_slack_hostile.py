"""Hostile input at every Slack entry point: unsigned garbage gets 401, signed garbage 400
(HTTP) or an acknowledged, logged drop (Socket Mode); never a traceback, nothing stored.
Socket Mode frames up to the link's limit are read and handled; larger ones are
acknowledged and dropped (:mod:`bots.slack_bot.socket_mode`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession

from bots.slack_bot.home import PAGE
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack
from tests.slack_helpers import bot_posts, running_bot, settle, slack_settings

HUGE_OFFSET = 2**63


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as fake:
        yield fake


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    ours = [r for r in caplog.records if r.name.startswith(("bots.", "slack_bolt", "core."))]
    bad = [r for r in ours if r.exc_info is not None or r.levelno >= logging.ERROR]
    assert bad == [], [r.getMessage() for r in bad]


def home_click(slack: FakeSlack) -> dict[str, Any]:
    """A click on a Home view whose ``private_metadata`` holds an offset no store takes."""
    metadata = json.dumps({"owner": "U1", "offset": HUGE_OFFSET, "query": ""})
    view = {"id": "V1", "type": "home", "private_metadata": metadata, "blocks": []}
    return slack.events.view_action(view, PAGE, "not-a-page", user="U1")


def event_with(slack: FakeSlack, **fields: Any) -> dict[str, Any]:
    return slack.events.event_callback(slack.events.message("hi", user="U1") | fields)


def slash_without_response_url(slack: FakeSlack) -> dict[str, str]:
    command = slack.events.slash_command("/memories", user="U1")
    del command["response_url"]
    return command


UNSIGNED = [
    pytest.param("1" * 5000, "v0=" + "0" * 64, id="5000-digit-timestamp"),
    pytest.param(None, "v0=\u00e9" + "0" * 63, id="non-ascii-signature"),
]


@pytest.mark.parametrize(("stamp", "signature"), UNSIGNED)
async def test_unsigned_garbage_gets_401(
    slack: FakeSlack,
    claude: FakeAnthropic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    stamp: str | None,
    signature: str,
) -> None:
    caplog.set_level("DEBUG")
    body = json.dumps(event_with(slack)).encode()
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp or str(int(time.time())),
        "X-Slack-Signature": signature,
    }
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    async with running_bot(settings) as running, ClientSession() as http:
        async with http.post(running.events_url, data=body, headers=headers) as resp:
            assert resp.status == 401
        no_traceback(caplog)
        assert await running.runtime.store.recent_turns(conversation_key="x", limit=1) == []
    assert claude.requests == []


def signed_http_cases(slack: FakeSlack) -> dict[str, tuple[bytes, str]]:
    form = "application/x-www-form-urlencoded"
    from urllib.parse import urlencode

    return {
        "json-list": (b"[1, 2]", "application/json"),
        "json-null": (b"null", "application/json"),
        "json-string": (b'"event_callback"', "application/json"),
        "event-list": (
            json.dumps({"type": "event_callback", "event": [1]}).encode(),
            "application/json",
        ),
        "ts-nan": (json.dumps(event_with(slack, ts="nan")).encode(), "application/json"),
        "ts-1e400": (json.dumps(event_with(slack, ts="1e400")).encode(), "application/json"),
        "slash-no-response-url": (urlencode(slash_without_response_url(slack)).encode(), form),
    }


@pytest.mark.parametrize("case", list(signed_http_cases(FakeSlack())))
async def test_signed_garbage_over_http_gets_400(
    slack: FakeSlack,
    claude: FakeAnthropic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    body, content_type = signed_http_cases(slack)[case]
    caplog.set_level("INFO")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        caplog.clear()
        sent = await slack.post_signed(running.events_url, body, content_type=content_type, sent={})
        assert sent.status == 400
        await settle(running)
        no_traceback(caplog)
        assert any("refused (400)" in r.getMessage() for r in caplog.records)
    assert claude.requests == []
    assert slack.calls("chat.postMessage") == []


async def test_a_home_click_with_an_offset_past_any_store_is_dropped(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        caplog.clear()
        sent = await slack.send_interaction(running.events_url, home_click(slack))
        assert sent.status == 200
        await settle(running)
        no_traceback(caplog)
    assert "U1" not in slack.home_views


def socket_cases(slack: FakeSlack) -> dict[str, tuple[str, Any]]:
    return {
        "payload-list": ("events_api", [1, 2]),
        "payload-null": ("events_api", None),
        "event-list": ("events_api", {"type": "event_callback", "event": [1]}),
        "ts-nan": ("events_api", event_with(slack, ts="nan")),
        "ts-1e400": ("events_api", event_with(slack, ts="1e400")),
        "slash-no-response-url": ("slash_commands", slash_without_response_url(slack)),
        "interactive-list": ("interactive", ["block_actions"]),
        "home-offset-2**63": ("interactive", home_click(slack)),
    }


@pytest.mark.parametrize("case", list(socket_cases(FakeSlack())))
async def test_socket_mode_garbage_is_acknowledged_and_dropped(
    slack: FakeSlack,
    claude: FakeAnthropic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    kind, payload = socket_cases(slack)[case]
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    async with running_bot(settings, http=False) as running:
        caplog.clear()
        envelope_id = await slack.push_envelope(kind, payload)
        assert await slack.wait_for_ack(envelope_id) == {"envelope_id": envelope_id}
        await settle(running)
        no_traceback(caplog)
        assert running.link is not None and running.link.connections == 1  # never dropped
    assert claude.requests == []
    assert slack.calls("chat.postMessage") == [] and "U1" not in slack.home_views


async def test_a_5_mb_frame_is_read_and_answered(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's default ``max_msg_size`` (4 MiB) dropped the link at such a frame, and each
    redelivery dropped it again; Slack documents no frame limit."""
    slack.redeliver_unacked = True
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    padding = [{"type": "rich_text", "elements": [{"type": "text", "text": "x" * 5_000_000}]}]
    async with running_bot(settings, http=False) as running:
        event = slack.events.message("a short question", user="U1", blocks=padding)
        envelope_id = await slack.push_event(event)
        await slack.wait_for_ack(envelope_id, timeout_s=10)
        await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="the answer")
        await settle(running)
        assert running.link is not None and running.link.connections == 1
    no_traceback(caplog)


async def test_a_frame_past_the_limit_is_acknowledged_and_dropped(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    caplog.set_level("INFO")
    async with running_bot(settings, http=False) as running:
        assert running.link is not None
        running.link.max_envelope_bytes = 100_000  # the 16 MiB default, scaled down
        event = slack.events.message("x" * 200_000, user="U1")
        envelope_id = await slack.push_event(event)
        assert await slack.wait_for_ack(envelope_id) == {"envelope_id": envelope_id}
        await settle(running)
        assert running.link.connections == 1
    assert claude.requests == []
    assert any("frame (limit 100000) was dropped" in r.getMessage() for r in caplog.records)
    no_traceback(caplog)


async def test_a_2_mb_event_over_http_is_read_and_answered(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's default ``client_max_size`` (1 MiB) answered 413 to such a request, so Slack
    retried it three times and the message was never answered."""
    padding = [{"type": "rich_text", "elements": [{"type": "text", "text": "x" * 2_000_000}]}]
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        event = slack.events.message("a short question", user="U1", blocks=padding)
        assert (await slack.send_event(running.events_url, event)).status == 200
        await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="the answer")
        await settle(running)
    no_traceback(caplog)
