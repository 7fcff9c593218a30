"""The real ``selfmind discord`` process stays connected: after each gateway fault (resume,
op 7, invalid session, abrupt close, refused handshakes) and after the gateway is unreachable
for a while, it comes back by itself and answers each message once; ``/healthz`` says how
long it has been down and ``/metrics`` counts the reconnects.

The 30-disconnect run over two minutes is marked ``soak`` (deselected by default; run it with
``pytest -m soak``)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import aiohttp
import pytest

from tests.discord_helpers import world
from tests.reconnect_helpers import (
    DISCORD,
    DISCORD_FAULTS,
    NO_REPLAY,
    SOAK_FAULTS,
    BotProcess,
    DiscordFaultRun,
    discord_env,
    soak,
)

ANSWER_TIMEOUT_S = 30.0
"""The bound on answering every message once the gateway is back."""
HEALTH_LINE = re.compile(r"health and metrics on http://127\.0\.0\.1:(\d+)")


async def test_an_event_after_each_fault_is_answered_once(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        bot = await BotProcess.start(w.db, discord_env(w), tmp_path, DISCORD)
        try:
            run = DiscordFaultRun(w.discord, w.alice)
            for fault in DISCORD_FAULTS:
                await run.apply(fault, timeout_s=ANSWER_TIMEOUT_S)
            started = time.monotonic()
            await run.wait_answered(timeout_s=ANSWER_TIMEOUT_S)
            assert time.monotonic() - started < ANSWER_TIMEOUT_S
            rows = run.rows()
            assert [r["fault"] for r in rows] == list(DISCORD_FAULTS)
            for row in rows:
                sent = 1 if row["fault"] in NO_REPLAY else 2
                assert (row["sent"], row["answered"], row["answered_twice"], row["lost"]) == (
                    sent,
                    sent,
                    0,
                    0,
                ), row
            assert w.discord.refused_gateway >= 3
            assert await bot.stop() == 0
        finally:
            bot.kill()
        log = "".join(bot.lines)
        assert "Traceback" not in log, log[-3000:]
        assert "connection attempt failed" in log


async def test_an_unreachable_gateway_comes_back_by_itself_and_healthz_says_so(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        env = discord_env(w, SELFMIND_METRICS_PORT="0", SELFMIND_RECONNECT_BACKOFF_MAX_S="1.0")
        bot = await BotProcess.start(w.db, env, tmp_path, DISCORD)
        try:
            (port,) = {int(m.group(1)) for line in bot.lines if (m := HEALTH_LINE.search(line))}
            base = f"http://127.0.0.1:{port}"
            run = DiscordFaultRun(w.discord, w.alice)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/healthz") as resp:
                    assert resp.status == 200
                # Unreachable for 4 s: every handshake refused (503) until then.
                w.discord.refuse_gateway(for_s=4.0)
                await w.discord.drop()
                await run.send("unreachable 4 s")  # replayed on RESUME
                await asyncio.sleep(2.0)
                async with http.get(f"{base}/healthz") as resp:
                    assert resp.status == 503
                    report = json.loads(await resp.text())
                assert report["ready"] is False and report["not_ready"] == ["platform"], report
                assert report["platform"]["down_s"] >= 1.5, report
                await w.discord.wait_for_resume(timeout_s=ANSWER_TIMEOUT_S)
                await run.send("unreachable 4 s")
                await run.wait_answered(timeout_s=ANSWER_TIMEOUT_S)
                async with http.get(f"{base}/healthz") as resp:
                    assert resp.status == 200, await resp.text()
                async with http.get(f"{base}/metrics") as resp:
                    metrics = await resp.text()
            assert w.discord.refused_gateway >= 3  # several attempts, none stuck
            assert "selfmind_platform_reconnects_total 1.0" in metrics, metrics
            (row,) = run.rows()
            assert (row["sent"], row["answered"], row["answered_twice"]) == (2, 2, 0), row
            assert await bot.stop() == 0
        finally:
            bot.kill()
        log = "".join(bot.lines)
        assert log.count("connection attempt failed") >= 3, log


@pytest.mark.soak
async def test_thirty_forced_disconnects_over_two_minutes_answer_each_once(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        bot = await BotProcess.start(w.db, discord_env(w), tmp_path, DISCORD)
        run = DiscordFaultRun(w.discord, w.alice)
        try:

            async def apply(fault: str) -> None:
                await run.apply(fault, timeout_s=ANSWER_TIMEOUT_S)

            await soak(
                apply, lambda: run.send("flowing"), SOAK_FAULTS, faults=30, over_s=120, every_s=0.5
            )
            await run.wait_answered(timeout_s=ANSWER_TIMEOUT_S)
            assert await bot.stop() == 0
        finally:
            bot.kill()
        assert "Traceback" not in "".join(bot.lines)
    assert sum(len(s.reconnect_s) for s in run.stats.values()) == 30
    sent = answered = 0
    for row in run.rows():
        assert (row["answered_twice"], row["lost"]) == (0, 0), row
        sent += int(str(row["sent"]))
        answered += int(str(row["answered"]))
    assert sent >= 200 and answered == sent  # about 240 flowing, 2 per fault
