"""Running the real SelfMind Discord bot (discord.py) against the fake Discord and fake Claude."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bots.discord_bot.client import SelfMindBot, start_bot
from core.runtime import open_runtime
from core.settings import Settings, load_settings
from core.store.database import database
from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.discord_server import (
    FakeDiscord,
    FakeInteraction,
    FakeUser,
    RecordedInteractionResponse,
    running_fake_discord,
)
from tests.loop_helpers import API_KEY, memory_text

WAIT_S = 10.0
START_S = 60.0
"""Seconds a ``selfmind discord`` child process gets to start or stop."""
NO_PINGS = {"parse": []}


@dataclass
class World:
    """The two fakes, the database, and two human users (both in the default guild)."""

    discord: FakeDiscord
    claude: FakeAnthropic
    db: Path
    alice: FakeUser
    bob: FakeUser

    def settings(self, **overrides: Any) -> Settings:
        return load_settings(
            anthropic_api_key=API_KEY,
            anthropic_base_url=self.claude.base_url,
            db=str(self.db),
            discord_bot_token=self.discord.token,
            discord_edit_interval_s=overrides.pop("discord_edit_interval_s", 0.05),
            shutdown_timeout_s=overrides.pop("shutdown_timeout_s", 5.0),
            **overrides,
        )

    def bot_posts(self, channel_id: int) -> list[dict[str, Any]]:
        """Messages the bot posted in a channel (REST form), oldest first."""
        bot_id = str(self.discord.bot_user.id)
        return [m for m in self.discord.messages_in(channel_id) if m["author"]["id"] == bot_id]

    def bot_texts(self, channel_id: int) -> list[str]:
        return [str(m["content"]) for m in self.bot_posts(channel_id)]


@contextlib.asynccontextmanager
async def world(tmp_path: Path, **discord_options: Any) -> AsyncIterator[World]:
    async with (
        running_fake_discord(**discord_options) as fake_discord,
        running_fake_anthropic(chunk_size=40) as fake_claude,
    ):
        alice = fake_discord.add_user("alice", global_name="Alice")
        bob = fake_discord.add_user("bob", global_name="Bob")
        yield World(fake_discord, fake_claude, tmp_path / "memory.db", alice, bob)


@contextlib.asynccontextmanager
async def running_bot(w: World, **overrides: Any) -> AsyncIterator[SelfMindBot]:
    """The composition of ``run_discord`` (runtime, bot, login, connect) in this process,
    until ``on_ready``; closed (answers and reflections finished) on exit."""
    settings = w.settings(**overrides)
    async with open_runtime(
        settings,
        db_url=database(settings.db).url,
        require_model=True,
        start=False,
        serve_health=True,
    ) as rt:
        assert rt.reflector is not None
        rt.reflector.retry_delay_s = 0.0
        bot = SelfMindBot(rt, guild_ready_timeout=0.05)
        runner = asyncio.create_task(start_bot(bot, w.discord.token))
        ready = asyncio.create_task(bot.wait_until_ready())
        try:
            done, _ = await asyncio.wait(
                {runner, ready}, timeout=WAIT_S, return_when="FIRST_COMPLETED"
            )
            if runner in done:
                runner.result()
            assert ready in done, "on_ready did not fire"
            yield bot
        finally:
            ready.cancel()
            await bot.close()
            await runner


async def eventually(probe: Callable[[], Any], *, timeout_s: float = WAIT_S, what: str = "") -> Any:
    """Poll ``probe`` until it returns something truthy; returns it."""
    async with asyncio.timeout(timeout_s):
        while True:
            result = probe()
            if result:
                return result
            await asyncio.sleep(0.01)
    raise AssertionError(what)  # pragma: no cover - the timeout raises first


async def settled(w: World, bot: SelfMindBot, *, chats: int) -> None:
    """Wait until Claude was asked ``chats`` chat requests in all and every answer is posted
    and finished, and the reflections ran."""
    try:
        await eventually(lambda: len(w.claude.requests_of("chat")) >= chats)
    except TimeoutError:
        raise AssertionError(
            f"expected {chats} chat requests, got {len(w.claude.requests_of('chat'))}"
        ) from None
    assert await bot.wait_idle(WAIT_S)
    assert await bot.reflector.drain(WAIT_S)


def last_user_text(w: World, index: int = -1) -> str:
    """The text of the last message of the ``index``-th chat request."""
    content = w.claude.requests_of("chat")[index].body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(b["text"] for b in content)


def chat_messages(w: World, index: int = -1) -> list[tuple[str, str]]:
    """(role, text) of every message of the ``index``-th chat request."""
    out = []
    for m in w.claude.requests_of("chat")[index].body["messages"]:
        content = m["content"]
        text = content if isinstance(content, str) else "".join(b["text"] for b in content)
        out.append((m["role"], text))
    return out


def memory_block(w: World, index: int = -1) -> str:
    """The volatile system block (memories) of the ``index``-th chat request."""
    return memory_text(w.claude.requests_of("chat")[index].body)


def key(user: FakeUser) -> str:
    return f"discord:{user.id}"


async def command(
    fake: FakeDiscord, name: str, user: FakeUser, **options: Any
) -> tuple[FakeInteraction, RecordedInteractionResponse]:
    channel_id = options.pop("channel_id", None)
    interaction = await fake.dispatch_slash_command(
        name, user=user, options=options, channel_id=channel_id
    )
    return interaction, await fake.wait_for_interaction_response(interaction)


async def final_text(fake: FakeDiscord, interaction: FakeInteraction) -> str:
    """The content of a deferred interaction's answer, once the followup replaced it."""
    await fake.wait_for_request("POST", f"/webhooks/{fake.application_id}/{interaction.token}")
    assert interaction.original_message_id is not None
    return str(fake.message(interaction.original_message_id)["content"])


def buttons(fake: FakeDiscord, message_id: int) -> dict[str, dict[str, Any]]:
    """The message's buttons by label."""
    rows = fake.message(message_id)["components"]
    return {b["label"]: b for row in rows for b in row["components"]}


def discord_process_env(w: World, **extra: str) -> dict[str, str]:
    """The environment of ``selfmind discord`` reaching both fakes through settings (the
    fake's current token; fast edits, INFO logs); ``extra`` overrides any of it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SELFMIND_", "ANTHROPIC_", "DISCORD_", "SLACK_"))
    }
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        ANTHROPIC_API_KEY=API_KEY,
        ANTHROPIC_BASE_URL=w.claude.base_url,
        DISCORD_BOT_TOKEN=w.discord.token,
        DISCORD_API_BASE_URL=w.discord.api_base,
        DISCORD_GATEWAY_URL=w.discord.gateway_url,
        SELFMIND_DISCORD_EDIT_INTERVAL_S="0.05",
        SELFMIND_LOG_LEVEL="INFO",
    )
    return env | extra


async def bot_process(
    w: World, log: IO[bytes], db: str | None = None
) -> asyncio.subprocess.Process:
    """``selfmind discord`` in a child process, reaching both fakes through settings, on
    ``db`` (a database URL; default: the world's SQLite file)."""
    env = discord_process_env(w)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        "--db",
        db or str(w.db),
        "discord",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        cwd=w.db.parent,
        env=env,
    )


async def stop(process: asyncio.subprocess.Process) -> int:
    """SIGTERM, then the exit code."""
    process.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(process.wait(), START_S)
