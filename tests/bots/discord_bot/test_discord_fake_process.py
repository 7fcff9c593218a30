"""The fake Discord as a separate process (``python -m tests.fakes.discord_server``) and the
real ``selfmind discord`` process against it, across a gateway outage: every handshake
refused for a few seconds after the connection drops; the bot comes back by itself
(RESUME) and answers the message sent during the outage once, and the one before it once."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.loop_helpers import API_KEY
from tests.reconnect_helpers import DISCORD, BotProcess
from tests.slack_helpers import clean_env

OUTAGE_S = 3.0
BEFORE, AFTER = "Before the outage.", "After the outage."


@asynccontextmanager
async def fake_discord_process() -> AsyncIterator[dict[str, Any]]:
    """``python -m tests.fakes.discord_server --port 0``; yields its JSON line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "tests.fakes.discord_server", "--port", "0"),
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        yield json.loads(await asyncio.wait_for(proc.stdout.readline(), 20))
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 10)
        assert proc.returncode == 0


@pytest.mark.slow
async def test_the_real_bot_across_a_gateway_outage_on_the_fake_as_a_process(
    tmp_path: Path,
) -> None:
    async with (
        fake_discord_process() as fake,
        running_fake_anthropic(chunk_size=40) as claude,
        aiohttp.ClientSession(base_url=fake["base_url"], raise_for_status=True) as http,
    ):

        async def control(what: str, **body: Any) -> Any:
            async with http.post(f"/_fake/{what}", json=body) as resp:
                return await resp.json()

        async def answers(channel_id: str) -> list[str]:
            async with http.get("/_fake/messages", params={"channel_id": channel_id}) as resp:
                messages = (await resp.json())["messages"]
            return [m["content"] for m in messages if m["author"].get("bot")]

        async def wait_for(channel_id: str, text: str, timeout_s: float = 30.0) -> None:
            deadline = time.monotonic() + timeout_s
            while text not in (found := await answers(channel_id)):
                assert time.monotonic() < deadline, f"no {text!r} in {found}"
                await asyncio.sleep(0.1)

        alice = await control("user", name="alice")
        dm = alice["dm_channel_id"]
        env = clean_env(
            ANTHROPIC_API_KEY=API_KEY,
            ANTHROPIC_BASE_URL=claude.base_url,
            DISCORD_BOT_TOKEN=fake["token"],
            DISCORD_API_BASE_URL=fake["api_base"],
            DISCORD_GATEWAY_URL=fake["gateway_url"],
            SELFMIND_DISCORD_EDIT_INTERVAL_S="0.05",
            SELFMIND_RECONNECT_BACKOFF_S="0.05",
            SELFMIND_RECONNECT_BACKOFF_MAX_S="0.5",
            SELFMIND_LOG_LEVEL="INFO",
        )
        claude.enqueue(BEFORE, kind="chat")
        claude.enqueue(AFTER, kind="chat")
        bot = await BotProcess.start(tmp_path / "m.db", env, tmp_path, DISCORD)
        try:
            await control("message", channel_id=dm, author_id=alice["id"], content="first?")
            await wait_for(dm, BEFORE)
            await control("gateway", fault="refuse", for_s=OUTAGE_S)
            await control("gateway", fault="drop")
            await control("message", channel_id=dm, author_id=alice["id"], content="second?")
            await asyncio.sleep(OUTAGE_S)
            await wait_for(dm, AFTER)
            await asyncio.sleep(0.5)  # time for a second answer, if one came (none may)
            found = await answers(dm)
            state = await control_state(http)
            assert state["refused"] >= 1 and state["resumes"] >= 1
            assert await bot.stop() == 0
        finally:
            bot.kill()
    assert (found.count(BEFORE), found.count(AFTER)) == (1, 1)  # each answered once
    log = "".join(bot.lines)
    assert "Traceback" not in log, log[-3000:]


async def control_state(http: aiohttp.ClientSession) -> dict[str, int]:
    async with http.get("/_fake/state") as resp:
        state: dict[str, int] = await resp.json()
        return state
