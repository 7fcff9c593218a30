"""Starting ``selfmind discord``: one clear line for each start-up mistake, the endpoint
settings, and where slash commands are synced."""

from __future__ import annotations

from pathlib import Path

import discord.gateway
import discord.http
import pytest
from typer.testing import CliRunner

from bots.cli import app
from bots.discord_bot.client import INTENT_HELP, run_discord
from core.errors import ConfigError
from core.settings import Settings, load_settings
from core.store.database import database
from tests.discord_helpers import running_bot, world
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.discord_server import FakeDiscord
from tests.loop_helpers import API_KEY

runner = CliRunner()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No .env and no SelfMind, Anthropic or Discord variables."""
    monkeypatch.chdir(tmp_path)
    for name in Settings.model_fields:
        for variable in (name.upper(), "SELFMIND_" + name.upper()):
            monkeypatch.delenv(variable, raising=False)
    return tmp_path


def test_missing_token_is_one_line(clean_env: Path) -> None:
    result = runner.invoke(app, ["--db", str(clean_env / "m.db"), "discord"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: DISCORD_BOT_TOKEN is not set")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_missing_anthropic_key_is_one_line(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "some-token")
    result = runner.invoke(app, ["--db", str(clean_env / "m.db"), "discord"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ANTHROPIC_API_KEY is not set: ")
    assert result.stderr.count("\n") == 1
    assert not (clean_env / "m.db").exists()  # checked before the database is opened


async def run_against(fake: FakeDiscord, tmp_path: Path, **overrides: object) -> None:
    async with running_fake_anthropic() as claude:
        settings = load_settings(
            anthropic_api_key=API_KEY,
            anthropic_base_url=claude.base_url,
            db=str(tmp_path / "m.db"),
            discord_api_base_url=fake.api_base,
            discord_gateway_url=fake.gateway_url,
            **overrides,
        )
        await run_discord(settings, db_url=database(settings.db).url)


async def test_refused_token_names_the_variable(tmp_path: Path) -> None:
    before = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    async with FakeDiscord() as fake:
        with pytest.raises(ConfigError, match=r"^DISCORD_BOT_TOKEN was refused"):
            await run_against(fake, tmp_path, discord_bot_token="not-the-token")
        # DISCORD_API_BASE_URL was used (the fake saw the login) and is undone afterwards.
        assert [r.path for r in fake.requests] == ["/users/@me"]
    assert before == (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)


async def test_message_content_intent_not_enabled_is_one_line(tmp_path: Path) -> None:
    async with FakeDiscord(grant_message_content=False) as fake:
        with pytest.raises(ConfigError) as raised:
            await run_against(fake, tmp_path, discord_bot_token=fake.token)
        assert str(raised.value) == INTENT_HELP
        assert "MESSAGE CONTENT" in INTENT_HELP and "\n" not in INTENT_HELP
        assert fake.connections and fake.identifies == []  # the gateway refused it (4014)


async def test_slash_commands_sync_to_the_development_guild(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        async with running_bot(w, discord_guild_id=w.discord.guild_id):
            pass
        assert w.discord.global_commands == []
        names = {c["name"] for c in w.discord.guild_commands[w.discord.guild_id]}
        assert names == {"remember", "forget", "memories", "memory"}
