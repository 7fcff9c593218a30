"""The replay's sender delivers events as Slack does: an event sent while the bot is down is
redelivered (``X-Slack-Retry-Num``, ``X-Slack-Retry-Reason: connection_failed``) until the
restarted bot acknowledges it; one never acknowledged is an error of its own.

The LoCoMo replay once counted a turn "neither answered nor stored" because its old sender
gave up after 7.5 s while a SIGTERM'd bot took 20 s to restart on the loaded machine: the
event never reached the bot, which Slack (retrying for about 6 minutes) would still have
delivered. Here a stand-in bot starts listening only after the sender's first attempts.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

import pytest
from aiohttp import web

import bench.replay_locomo as replay
from tests.fakes.slack_server import running_fake_slack


@dataclass
class _Bot:
    url: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve(port: int, seen: list[dict[str, str]], status: int) -> web.AppRunner:
    async def events(request: web.Request) -> web.Response:
        seen.append(
            {
                "num": request.headers.get("X-Slack-Retry-Num", ""),
                "reason": request.headers.get("X-Slack-Retry-Reason", ""),
                "event_id": str((await request.json())["event_id"]),
            }
        )
        return web.Response(status=status)

    app = web.Application()
    app.add_routes([web.post("/slack/events", events)])
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def test_an_event_sent_while_the_bot_restarts_is_redelivered_until_acknowledged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replay, "SLACK_RETRY_DELAYS_S", (0.05, 0.1, 1.0))
    port = _free_port()
    seen: list[dict[str, str]] = []
    tally = replay.Tally()
    async with running_fake_slack() as slack:
        event = slack.events.message("hello", user="UREPLAY1")
        bot = _Bot(f"http://127.0.0.1:{port}/slack/events")
        sending = asyncio.create_task(
            replay.send_with_retries(slack, bot, event, "EvRestart1", tally)  # type: ignore[arg-type]
        )
        await asyncio.sleep(0.4)  # down for the first three attempts (0, 0.05, 0.15 s)
        runner = await _serve(port, seen, 200)
        try:
            delivered = await sending
        finally:
            await runner.cleanup()
        assert slack.deliveries["EvRestart1"] == [-1, -1, -1, 200]
    assert delivered is True
    assert seen == [{"num": "3", "reason": "connection_failed", "event_id": "EvRestart1"}]
    assert tally.errors == 0 and tally.dropped == 0


async def test_an_event_never_acknowledged_is_an_error_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replay, "SLACK_RETRY_DELAYS_S", (0.01, 0.01, 0.01))
    port = _free_port()
    seen: list[dict[str, str]] = []
    tally = replay.Tally()
    async with running_fake_slack() as slack:
        event = slack.events.message("hello", user="UREPLAY2")
        bot = _Bot(f"http://127.0.0.1:{port}/slack/events")
        runner = await _serve(port, seen, 500)
        try:
            delivered = await replay.send_with_retries(slack, bot, event, "EvRefused", tally)  # type: ignore[arg-type]
        finally:
            await runner.cleanup()
    assert delivered is False
    assert [s["num"] for s in seen] == ["", "1", "2", "3"]
    assert [s["reason"] for s in seen] == ["", "http_error", "http_error", "http_error"]
    assert tally.reasons == {
        "event answered HTTP 500": 4,
        "event never acknowledged in Slack's retries": 1,
    }
    assert tally.dropped == 1
