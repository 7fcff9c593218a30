"""The Slack bot in Socket Mode: envelopes over the fake's websocket, acked at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.errors import ConfigError
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.slack_server import running_fake_slack
from tests.slack_helpers import TEAM, bot_posts, running_bot, settle, slack_settings


async def test_socket_mode_answers_once_acks_everything_and_runs_commands(
    tmp_path: Path,
) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        settings = slack_settings(slack, claude, tmp_path / "m.db", slack_signing_secret=None)
        async with running_bot(settings, http=False) as running:
            assert running.port is None
            await slack.wait_for_socket()
            assert len(slack.calls("apps.connections.open")) == 1

            event = slack.events.message("Hello over the socket", user="U1")
            payload = slack.events.event_callback(event, event_id="EvSOCKET")
            first = await slack.push_envelope("events_api", payload)
            assert await slack.wait_for_ack(first) == {"envelope_id": first}
            await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="answer")
            retry = await slack.push_envelope(
                "events_api", payload, retry_attempt=1, retry_reason="timeout"
            )
            await slack.wait_for_ack(retry)

            # Other event types and subtypes are acked too, so Slack never redelivers them
            # (reaction_added: as if the manifest subscribed to an event no listener handles).
            slack.bot_events.add("reaction_added")
            for other in (
                {"type": "reaction_added", "user": "U1", "reaction": "tada"},
                slack.events.message_changed(event, "edited"),
            ):
                await slack.wait_for_ack(await slack.push_event(other))

            command = slack.events.slash_command("/remember", "The user likes tea.", user="U1")
            acked = await slack.wait_for_ack(await slack.push_envelope("slash_commands", command))
            assert acked.get("payload") in (None, {})
            reply = await slack.wait_for_response(command["response_url"])
            assert reply["text"] == "Remembered (`#1`): The user likes tea."
            await settle(running)

            assert len(claude.requests_of("chat")) == 1
            assert len(bot_posts(slack, "D1")) == 1
            assert await running.runtime.service.count(user_key=f"slack:{TEAM}:U1") == 1
        assert slack.open_sockets == 0  # closed on the way out


@pytest.mark.parametrize("error", ["forbidden_team", "missing_scope"])
async def test_an_app_slack_will_not_connect_stops_with_one_line_not_a_retry_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, error: str
) -> None:
    """``apps.connections.open`` answering ``forbidden_team`` (the team cannot use the API)
    is not fixed by retrying: start-up ends with one error naming the fix."""
    async with running_fake_anthropic() as claude, running_fake_slack() as slack:
        slack.fail_next("apps.connections.open", error=error, times=100)
        settings = slack_settings(slack, claude, tmp_path / "m.db", slack_signing_secret=None)

        async def start() -> None:
            async with asyncio.timeout(10):  # the old code retried forever
                async with running_bot(settings, http=False):
                    pass

        with pytest.raises(ConfigError, match=error) as refused:
            await start()
    assert "api.slack.com/apps" in str(refused.value)
    assert len(slack.calls("apps.connections.open")) == 1
    assert not [r for r in caplog.records if "connection attempt" in r.getMessage()]
