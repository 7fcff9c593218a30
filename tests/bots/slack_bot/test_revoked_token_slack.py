"""A bot token Slack revokes ends the real ``selfmind slack`` process with one line naming
the fix (reinstall, new SLACK_BOT_TOKEN) and exit 1, in Socket Mode and over HTTP: the
``tokens_revoked`` and ``app_uninstalled`` events, and the Web API errors ``invalid_auth``,
``token_revoked``, ``account_inactive``, ``not_authed`` on the bot token. A message stored
before the failure is answered, once, after a restart with the new token. A revoked app-level
token (Socket Mode's) ends it too, at the link's next refresh. The events arrive only because
manifest.yml subscribes to them (the fake delivers nothing else, as Slack)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from bots.slack_bot.revocation import REFUSED_BOT_TOKEN_ERRORS
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, running_fake_slack
from tests.reconnect_helpers import HTTP_MODE, SOCKET_MODE, BotProcess, socket_mode_env
from tests.slack_helpers import bot_posts, running_bot, slack_process_env, slack_settings

ANSWER_TIMEOUT_S = 30.0


def stored_turns(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT role, text FROM turns ORDER BY id").fetchall()
    return [(str(r), str(t)) for r, t in rows]


def fix_line(bot: BotProcess) -> str:
    """The one line naming the fix."""
    (line,) = [line for line in bot.lines if "SLACK_BOT_TOKEN" in line]
    assert line.startswith("error: ") and "reinstall the app" in line, line
    return line


@pytest.mark.parametrize("event", ["tokens_revoked", "app_uninstalled"])
async def test_a_revoking_event_ends_the_socket_mode_process(tmp_path: Path, event: str) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        bot = await BotProcess.start(tmp_path / "m.db", socket_mode_env(slack, claude), tmp_path)
        try:
            payload = getattr(slack.events, event)()
            envelope_id = await slack.push_event(payload)
            await slack.wait_for_ack(envelope_id)  # acknowledged, so never redelivered
            assert await bot.wait() == 1
        finally:
            bot.kill()
        assert event in fix_line(bot)
        assert "Traceback" not in "".join(bot.lines)


async def test_a_revoked_app_token_ends_the_socket_mode_process(tmp_path: Path) -> None:
    """The app-level token is the Socket Mode link's (HTTP mode has none): revoked, the next
    refresh's apps.connections.open is refused and the process ends with one line naming the
    fix, instead of retrying forever (``invalid_auth`` at start-up: test_slack_bot.py)."""
    error = "token_revoked"
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        bot = await BotProcess.start(tmp_path / "m.db", socket_mode_env(slack, claude), tmp_path)
        try:
            slack.revoke_app_token(error)
            await slack.disconnect_sockets("refresh_requested")  # Slack refreshes regularly
            assert await bot.wait() == 1
        finally:
            bot.kill()
        (line,) = [line for line in bot.lines if "SLACK_APP_TOKEN" in line]
        assert line.startswith("error: ") and f"({error})" in line, line
        assert "create a new app-level token" in line
        assert "Traceback" not in "".join(bot.lines)


async def answered_once_after_restart(
    slack: FakeSlack, db: Path, env: dict[str, str], args: tuple[str, ...], channel: str
) -> None:
    """Restart with ``env`` (the new token): the stored message is answered, once."""
    bot = await BotProcess.start(db, env, db.parent, args)
    try:
        await slack.wait_until(
            lambda: bool(bot_posts(slack, channel)),
            timeout_s=ANSWER_TIMEOUT_S,
            what="the stored message answered after the restart",
        )
        await asyncio.sleep(0.5)
        assert await bot.stop() == 0
    finally:
        bot.kill()
    assert len(bot_posts(slack, channel)) == 1
    assert [r for r, _ in stored_turns(db)] == ["user", "assistant"]


async def test_invalid_auth_in_socket_mode_stops_and_the_restart_answers(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True
        bot = await BotProcess.start(db, socket_mode_env(slack, claude), tmp_path)
        try:
            slack.revoke_bot_token("invalid_auth")
            event = slack.events.message("kept across the revocation", user="U5")
            await slack.wait_for_ack(await slack.push_event(event))  # stored, then acked
            assert await bot.wait() == 1
        finally:
            bot.kill()
        assert "invalid_auth" in fix_line(bot)
        assert "Traceback" not in "".join(bot.lines)  # the failed answer: one line, no trace
        assert stored_turns(db) == [("user", "kept across the revocation")]
        await answered_once_after_restart(
            slack, db, socket_mode_env(slack, claude), SOCKET_MODE, "D5"
        )


async def test_token_revoked_over_http_stops_and_the_restart_answers(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        bot = await BotProcess.start(
            db, slack_process_env(slack, claude.base_url), tmp_path, HTTP_MODE
        )
        try:
            slack.revoke_bot_token("token_revoked")
            event = slack.events.message("kept over http", user="U6")
            sent = await slack.send_event(bot.events_url, event)
            assert sent.status == 200  # stored before the acknowledgement
            assert await bot.wait() == 1
        finally:
            bot.kill()
        assert "token_revoked" in fix_line(bot)
        assert "Traceback" not in "".join(bot.lines)  # the failed answer: one line, no trace
        assert stored_turns(db) == [("user", "kept over http")]
        env = slack_process_env(slack, claude.base_url)
        await answered_once_after_restart(slack, db, env, HTTP_MODE, "D6")


@pytest.mark.parametrize("error", sorted(REFUSED_BOT_TOKEN_ERRORS))
async def test_each_refused_token_error_stops_the_bot(tmp_path: Path, error: str) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        settings = slack_settings(slack, claude, tmp_path / "m.db")
        async with running_bot(settings) as running:
            watch = running.bot.token_watch
            slack.revoke_bot_token(error)
            event = slack.events.message("answer me", user="U4")
            assert (await slack.send_event(running.events_url, event)).status == 200
            failure = await asyncio.wait_for(watch.wait(), 10)
            assert f"({error} on " in str(failure), failure


async def test_what_does_not_concern_the_bot_token_does_not_stop_it(tmp_path: Path) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        settings = slack_settings(slack, claude, tmp_path / "m.db")
        async with running_bot(settings) as running:
            watch = running.bot.token_watch
            # A user token revoked, not the bot's; other errors of the bot token.
            users_only = slack.events.tokens_revoked(bot=False)
            assert (await slack.send_event(running.events_url, users_only)).status == 200
            slack.fail_next("chat.postMessage", error="channel_not_found")
            slack.fail_next("chat.postMessage", error="ratelimited", retry_after=0)
            event = slack.events.message("still answered", user="U3")
            assert (await slack.send_event(running.events_url, event)).status == 200
            await asyncio.sleep(1.0)
            assert watch.failure is None


@pytest.mark.parametrize("event", ["tokens_revoked", "app_uninstalled"])
async def test_a_revoking_event_over_http_stops_the_bot(tmp_path: Path, event: str) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        settings = slack_settings(slack, claude, tmp_path / "m.db")
        async with running_bot(settings) as running:
            payload = getattr(slack.events, event)()
            assert (await slack.send_event(running.events_url, payload)).status == 200
            failure = await asyncio.wait_for(running.bot.token_watch.wait(), 10)
            assert f"({event} event)" in str(failure), failure
