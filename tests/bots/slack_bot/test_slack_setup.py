"""Setup pieces of the Slack bot: the app manifest, the CLI entry, the URL check, helpers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bots.cli import app
from bots.slack_bot.app import retry_num
from bots.slack_bot.commands import COMMANDS, escape_mrkdwn
from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.slack_server import manifest_bot_events, manifest_list, running_fake_slack
from tests.slack_helpers import running_bot, slack_settings

MANIFEST = (REPO_ROOT / "manifest.yml").read_text(encoding="utf-8")


def test_manifest_has_the_commands_events_scopes_and_socket_mode() -> None:
    commands = re.findall(r"^\s*- command: (\S+)", MANIFEST, flags=re.M)
    assert sorted(commands) == sorted(COMMANDS)
    assert manifest_list("bot_events") == [
        "app_home_opened",
        "app_mention",
        "message.channels",
        "message.groups",
        "message.im",
        "message.mpim",
        "tokens_revoked",
        "app_uninstalled",
    ]
    scopes = set(manifest_list("bot"))
    assert {"app_mentions:read", "channels:history", "groups:history", "im:history"} <= scopes
    assert "mpim:history" in scopes  # group DMs
    assert manifest_bot_events()  # every subscribed event has its scope
    assert {"chat:write", "commands", "im:write", "files:write"} <= scopes
    assert "assistant:write" in scopes  # setStatus, setSuggestedPrompts
    assert re.search(r"home_tab_enabled: true", MANIFEST)  # the memory page
    assert re.search(r"^  agent_view:\n    agent_description: \S", MANIFEST, flags=re.M)
    assert re.search(r"^  socket_mode_enabled: true$", MANIFEST, flags=re.M)
    assert re.search(r"interactivity:\n    is_enabled: true", MANIFEST)
    assert re.search(r"messages_tab_enabled: true", MANIFEST)  # users can DM the bot


def test_the_cli_names_a_missing_setting_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    result = runner.invoke(app, ["--db", str(tmp_path / "m.db"), "slack"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: SLACK_BOT_TOKEN is not set: ")
    assert result.stderr.count("\n") == 1
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    result = runner.invoke(app, ["--db", str(tmp_path / "m.db"), "slack", "--http"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: SLACK_SIGNING_SECRET is not set")
    result = runner.invoke(app, ["--db", str(tmp_path / "m.db"), "slack", "--port", "3000"])
    assert (result.exit_code, result.stderr) == (2, "error: --port needs --http\n")
    assert not (tmp_path / "m.db").exists()  # nothing opened before the settings are right


async def test_slack_url_verification_is_answered(tmp_path: Path) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        settings = slack_settings(slack, claude, tmp_path / "m.db")
        async with running_bot(settings) as running:
            body = {"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV", "type": "url_verification"}
            sent = await slack.post_signed(
                running.events_url,
                json.dumps(body).encode(),
                content_type="application/json",
                sent=body,
            )
    assert sent.status == 200
    assert sent.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV"}


def test_retry_num_reads_only_real_retries() -> None:
    assert retry_num({}) == 0
    assert retry_num({"x-slack-retry-num": ["0"]}) == 0  # Bolt's Socket Mode default
    assert retry_num({"x-slack-retry-num": ["2"]}) == 2
    assert retry_num({"x-slack-retry-num": ["x"]}) == 0


def test_memory_text_cannot_mention_or_link() -> None:
    assert escape_mrkdwn("<!channel> & <@U1>") == "&lt;!channel&gt; &amp; &lt;@U1&gt;"


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
async def test_web_clients_log_at_an_explicit_level(level: str) -> None:
    """slack_sdk builds each request's debug line (params, headers, body) when
    ``logger.level <= DEBUG``, which a logger left at NOTSET (0) always is: the clients'
    logger carries the configured level, so at INFO nothing is built and at DEBUG it is."""
    import logging

    from aiohttp import ClientSession

    from bots.slack_bot.app import web_clients
    from core.logs import configure_logging
    from core.settings import Settings

    configure_logging(level=level)
    try:
        async with ClientSession() as session:
            client, stream_client = web_clients(
                Settings(_env_file=None),  # type: ignore[call-arg]
                "xoxb-1",
                session,
            )
        for c in (client, stream_client):
            assert c.logger.level == getattr(logging, level)
            assert (c.logger.level <= logging.DEBUG) is (level == "DEBUG")
    finally:
        configure_logging(level="WARNING")
