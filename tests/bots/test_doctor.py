"""``selfmind doctor`` against the fakes: a fresh machine, every secret set (never printed
whole), and a service that cannot be reached or refuses."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bots.cli import app
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.discord_server import running_fake_discord
from tests.fakes.slack_server import running_fake_slack

runner = CliRunner()
API_KEY = "sk-ant-api03-" + "k" * 40


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh machine: an empty home and config directory, no settings in the
    environment, run from an empty folder."""
    import os

    for name in list(os.environ):
        if name.startswith(("SELFMIND_", "ANTHROPIC_", "SLACK_", "DISCORD_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def doctor() -> tuple[int, str, str]:
    result = runner.invoke(app, ["doctor"])
    return result.exit_code, result.stdout, result.stderr


async def test_a_fresh_machine(machine: Path) -> None:
    code, out, err = await asyncio.to_thread(doctor)
    assert (code, err) == (0, ""), out
    assert f"absent {machine / 'work' / '.env'}" in out
    assert f"absent {machine / 'config' / 'selfmind' / '.env'}" in out
    assert "($SELFMIND_ENV_FILE is not set)" in out
    assert "none (every setting has its default)" in out
    db = machine / "home" / ".selfmind" / "memory.db"
    assert f"ok   SQLite: {db}: not created yet" in out
    assert not db.exists()  # doctor writes nothing
    for line in ("-    Anthropic:", "-    Slack:", "-    Discord:"):
        assert line in out


async def test_a_copied_env_example_shows_only_what_differs_from_the_defaults(
    machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core import __version__
    from tests.conftest import REPO_ROOT

    example = (REPO_ROOT / ".env.example").read_text(encoding="utf-8")
    (machine / "work" / ".env").write_text(example, encoding="utf-8")  # cp .env.example .env
    monkeypatch.setenv("SELFMIND_TOP_K", "9")
    code, out, err = await asyncio.to_thread(doctor)
    assert (code, err) == (0, ""), out
    assert out.splitlines()[0].startswith(f"selfmind {__version__}, Python ")
    lines = out.splitlines()
    start = lines.index("settings that differ from their defaults:")
    set_in_example = [
        line.split("=", 1)[0]
        for line in example.splitlines()
        if line and not line.startswith("#") and line.split("=", 1)[1].strip()
    ]
    assert len(set_in_example) > 40
    assert lines[start + 1 : start + 3] == [
        "  SELFMIND_TOP_K=9  (environment)",
        f"  ({len(set_in_example) - 1} more set to their default values, not shown; every other"
        " setting is not set and has its default)",
    ]
    assert lines[start + 3] == "checks:"


async def test_secrets_set_answered_by_every_service_and_never_printed_whole(
    machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings_file = machine / "team.env"
    settings_file.write_text(f"SELFMIND_TOP_K=9\nANTHROPIC_API_KEY={API_KEY}\n")
    monkeypatch.setenv("SELFMIND_ENV_FILE", str(settings_file))
    async with (
        running_fake_anthropic(api_key=API_KEY) as claude,
        running_fake_slack() as slack,
        running_fake_discord() as discord,
    ):
        monkeypatch.setenv("ANTHROPIC_BASE_URL", claude.base_url)
        monkeypatch.setenv("SLACK_API_URL", slack.api_url)
        monkeypatch.setenv("SLACK_BOT_TOKEN", slack.bot_token)
        monkeypatch.setenv("SLACK_APP_TOKEN", slack.app_token)
        monkeypatch.setenv("DISCORD_API_BASE_URL", discord.api_base)
        monkeypatch.setenv("DISCORD_BOT_TOKEN", discord.token)
        code, out, err = await asyncio.to_thread(doctor)
    assert (code, err) == (0, ""), out
    assert f"read   {settings_file}  ($SELFMIND_ENV_FILE)" in out
    assert f"SELFMIND_TOP_K=9  ({settings_file})" in out
    assert f"ANTHROPIC_API_KEY=sk-ant… ({len(API_KEY)} characters)  ({settings_file})" in out
    assert f"SLACK_API_URL={slack.api_url}  (environment)" in out
    for secret in (API_KEY, slack.bot_token, slack.app_token, discord.token):
        assert secret not in out and secret[:-4] not in out
    assert "ok   Anthropic: " in out and "key accepted" in out
    assert "ok   Slack: auth.test: bot " in out and "app token accepted" in out
    assert "ok   Discord: GET /users/@me: bot selfmind" in out


async def test_an_unreachable_or_refusing_service_is_the_line_to_fix(
    machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_fake_anthropic(api_key="sk-ant-the-right-one") as claude:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", claude.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)  # not the one the fake takes
        monkeypatch.setenv("DISCORD_API_BASE_URL", "http://127.0.0.1:9/api/v10")  # nobody
        monkeypatch.setenv("DISCORD_BOT_TOKEN", "x" * 40)
        code, out, err = await asyncio.to_thread(doctor)
    assert code == 1, out
    assert "FAIL Anthropic: " in out and "The API key was refused" in out
    assert "FAIL Discord: cannot reach http://127.0.0.1:9/api/v10" in out
    assert err.count("\n") == 1 and err.startswith("error: Anthropic: ")
    assert API_KEY not in out + err


@pytest.mark.sqlite_only
async def test_the_database_line_says_what_to_run(
    machine: Path, backend: str, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.runtime import open_store

    store = await open_store(db_url)
    await store.close()
    monkeypatch.setenv("SELFMIND_DB", db_url)
    code, out, _ = await asyncio.to_thread(doctor)
    assert code == 0 and "ok   SQLite: " in out and ": schema up to date (" in out
    import sqlite3

    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        conn.execute(
            "DELETE FROM schema_migrations"
            " WHERE number = (SELECT MAX(number) FROM schema_migrations)"
        )
    conn.close()
    code, out, err = await asyncio.to_thread(doctor)
    assert code == 1 and "behind: 1 migrations to apply" in out
    assert err.rstrip().endswith("run selfmind db migrate")
