"""Discord: discord.py's own reconnect brings the bot back after the gateway drops or is
unreachable for a while; what was missed is replayed on RESUME and answered once."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bots.discord_bot.client import CappedBackoff
from tests.discord_helpers import eventually, running_bot, world
from tests.reconnect_helpers import DISCORD_FAULTS, NO_REPLAY, DiscordFaultRun


async def test_each_gateway_fault_comes_back_and_answers_each_message_once(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w, running_bot(w) as bot:
        readiness = bot.rt.readiness
        run = DiscordFaultRun(w.discord, w.alice)
        for fault in DISCORD_FAULTS:
            await run.apply(fault)
            await eventually(lambda: readiness.ready, what=f"ready after {fault}")
        await run.wait_answered()
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
        assert readiness.reconnects == len(DISCORD_FAULTS)
        assert w.discord.refused_gateway >= 1


async def test_healthz_is_not_ready_while_the_gateway_is_unreachable(tmp_path: Path) -> None:
    async with world(tmp_path) as w, running_bot(w) as bot:
        readiness = bot.rt.readiness
        w.discord.refuse_gateway(for_s=1.0)
        await w.discord.drop()
        await eventually(lambda: not readiness.ready, what="not ready")
        await asyncio.sleep(0.5)
        report = readiness.report()
        assert report["ready"] is False and report["platform"]["down_s"] >= 0.4, report
        await eventually(lambda: readiness.ready, timeout_s=30, what="ready again")
        assert readiness.report()["platform"]["reconnects"] == 1


def test_capped_backoff_never_waits_longer_than_the_cap() -> None:
    backoff = CappedBackoff(base_s=0.05, max_s=0.5)
    delays = [backoff.delay() for _ in range(200)]
    assert all(0 <= d <= 0.5 for d in delays)
    assert max(delays) > 0.2  # it does grow: 0.05 * 2^3 = 0.4 is the top of the range
    default = CappedBackoff(base_s=1.0, max_s=30.0)
    assert max(default.delay() for _ in range(200)) <= 30.0


async def test_a_failed_attempt_is_one_info_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with world(tmp_path) as w, running_bot(w, reconnect_backoff_s=0.05) as bot:
        w.discord.refuse_gateway(times=2)
        await w.discord.drop()
        await eventually(lambda: w.discord.refused_gateway >= 2, what="two refusals")
        await eventually(lambda: bot.rt.readiness.ready, what="ready again")
    lines = [r for r in caplog.records if "connection attempt failed" in r.getMessage()]
    assert len(lines) == 2, [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.INFO and r.exc_info is None for r in lines)
    assert "WSServerHandshakeError" in lines[0].getMessage()
    assert not [r for r in caplog.records if "Attempting a reconnect" in r.getMessage()]
