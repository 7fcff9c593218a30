"""Discord: discord.py's own reconnect brings the bot back after the gateway drops or is
unreachable for a while; what was missed is replayed on RESUME and answered once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.discord_helpers import eventually, running_bot, world
from tests.reconnect_helpers import DISCORD_FAULTS, DiscordFaultRun


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
            assert (row["sent"], row["answered"], row["answered_twice"], row["lost"]) == (
                2,
                2,
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
