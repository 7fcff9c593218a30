"""Slack Socket Mode survives refreshes, drops and refused reconnects: the real ``selfmind
slack`` process against the fake Slack's faults, every event answered exactly once."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from tests.discord_helpers import eventually
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.slack_server import running_fake_slack
from tests.reconnect_helpers import SLACK_FAULTS, BotProcess, SlackFaultRun, soak, socket_mode_env
from tests.slack_helpers import bot_posts, running_bot, slack_settings

ANSWER_TIMEOUT_S = 30.0
HEALTH_LINE = re.compile(r"health and metrics on http://127\.0\.0\.1:(\d+)")


async def poll(predicate: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    """Wait until ``predicate()`` holds (state the fake cannot see, e.g. readiness)."""
    await eventually(predicate, timeout_s=timeout_s)


async def test_an_event_after_each_fault_is_answered_once(tmp_path: Path) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True
        bot = await BotProcess.start(tmp_path / "m.db", socket_mode_env(slack, claude), tmp_path)
        try:
            run = SlackFaultRun(slack)
            for fault in SLACK_FAULTS:
                await run.apply(fault)
                await run.send_event(fault)
            await run.mid_event()
            await run.wait_answered(timeout_s=ANSWER_TIMEOUT_S)
            rows = run.rows()
            assert [r["fault"] for r in rows] == [*SLACK_FAULTS, "abrupt close mid-event"]
            for row in rows:
                assert (row["answered"], row["answered_twice"], row["lost"]) == (1, 0, 0), row
            # The mid-event envelope was never acked on its connection: Slack's redelivery
            # on the new one is what got it answered.
            assert slack.redelivered
            assert await bot.stop() == 0
        finally:
            if bot.proc.returncode is None:
                bot.proc.kill()
        log = "".join(bot.lines)
        # One INFO line per failed attempt, one when connected again.
        assert log.count("connection attempt") >= 6, log
        assert "connected again after" in log
        assert "refresh_requested, opening a new connection first" in log


async def test_thirty_forced_disconnects_with_events_flowing_answer_each_once(
    tmp_path: Path,
) -> None:
    """30 faults (every kind, in a shuffled cycle) over about 20 s: the disconnects are what
    is counted, the interval only paces them (the two-minute run is the soak below)."""
    rng = random.Random(20)
    faults = [list(SLACK_FAULTS)[i % len(SLACK_FAULTS)] for i in range(30)]
    rng.shuffle(faults)
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True
        bot = await BotProcess.start(tmp_path / "m.db", socket_mode_env(slack, claude), tmp_path)
        run = SlackFaultRun(slack)
        stop = asyncio.Event()

        async def flow() -> None:
            while not stop.is_set():
                await run.send_event("flowing")
                await asyncio.sleep(0.1)

        sender = asyncio.create_task(flow())
        try:
            started = time.monotonic()
            for fault in faults:
                await run.apply(fault)
                await asyncio.sleep(0.3)
            stop.set()
            await sender
            assert time.monotonic() - started < 120
            await run.wait_answered(timeout_s=ANSWER_TIMEOUT_S)
            (flowing,) = [r for r in run.rows() if r["fault"] == "flowing"]
            assert int(str(flowing["sent"])) >= 50
            assert flowing["answered"] == flowing["sent"], flowing
            assert (flowing["answered_twice"], flowing["lost"]) == (0, 0), flowing
            assert sum(len(s.reconnect_s) for s in run.stats.values()) == 30
            assert await bot.stop() == 0
        finally:
            stop.set()
            sender.cancel()
            if bot.proc.returncode is None:
                bot.proc.kill()


@pytest.mark.soak
async def test_thirty_forced_disconnects_over_two_minutes_answer_each_once(
    tmp_path: Path,
) -> None:
    """The issue's pace: 30 faults over two minutes, a DM every half second (``-m soak``)."""
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True
        bot = await BotProcess.start(tmp_path / "m.db", socket_mode_env(slack, claude), tmp_path)
        run = SlackFaultRun(slack)
        try:
            await soak(
                run.apply,
                lambda: run.send_event("flowing"),
                list(SLACK_FAULTS),
                faults=30,
                over_s=120,
                every_s=0.5,
            )
            await run.wait_answered(timeout_s=ANSWER_TIMEOUT_S)
            assert await bot.stop() == 0
        finally:
            bot.kill()
    (flowing,) = [r for r in run.rows() if r["fault"] == "flowing"]
    assert int(str(flowing["sent"])) >= 200
    assert flowing["answered"] == flowing["sent"], flowing
    assert (flowing["answered_twice"], flowing["lost"]) == (0, 0), flowing
    assert sum(len(s.reconnect_s) for s in run.stats.values()) == 30


async def test_link_disabled_ends_the_process_with_one_line_and_exit_1(tmp_path: Path) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        bot = await BotProcess.start(tmp_path / "m.db", socket_mode_env(slack, claude), tmp_path)
        try:
            await slack.disconnect_sockets("link_disabled")
            assert await bot.wait() == 1
        finally:
            if bot.proc.returncode is None:
                bot.proc.kill()
        named = [line for line in bot.lines if "link_disabled" in line]
        assert len(named) == 1, bot.lines
        assert "turn Socket Mode on" in named[0]
        assert len(slack.calls("apps.connections.open")) == 1  # no reconnect loop


async def test_a_revoked_app_token_on_reconnect_ends_the_process(tmp_path: Path) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        bot = await BotProcess.start(tmp_path / "m.db", socket_mode_env(slack, claude), tmp_path)
        try:
            slack.fail_next("apps.connections.open", error="token_revoked")
            await slack.drop_sockets(abrupt=True)
            assert await bot.wait() == 1
        finally:
            if bot.proc.returncode is None:
                bot.proc.kill()
        named = [line for line in bot.lines if "token_revoked" in line]
        assert len(named) == 1, bot.lines
        assert "SLACK_APP_TOKEN" in named[0]


async def test_healthz_is_not_ready_while_down_and_counts_the_reconnect(tmp_path: Path) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        settings = slack_settings(
            slack,
            claude,
            tmp_path / "m.db",
            slack_signing_secret=None,
            reconnect_backoff_s=0.2,
            reconnect_backoff_max_s=0.3,
        )
        async with running_bot(settings, http=False) as running:
            readiness = running.runtime.readiness
            await slack.wait_for_socket()
            assert readiness.ready and readiness.reconnects == 0
            # Refused until the test lets it in: full jitter may draw waits near 0 s, so a
            # fixed number of refusals could end before the report below is taken.
            slack.refuse_sockets()
            await slack.drop_sockets(abrupt=True)
            await poll(lambda: not readiness.ready)
            await poll(lambda: slack.sockets_refused >= 2)
            await asyncio.sleep(0.3)
            report = readiness.report()
            assert report["ready"] is False and "platform" in report["not_ready"]
            assert report["platform"]["down_s"] > 0.2, report
            slack.accept_sockets()
            await poll(lambda: readiness.ready)
            assert readiness.reconnects == 1
            # A refresh hands over without a gap: still ready, no reconnect counted.
            await slack.disconnect_sockets("refresh_requested")
            await slack.wait_for_socket(connections=3)
            await poll(lambda: slack.open_sockets == 1)
            assert readiness.ready and readiness.reconnects == 1
            event = slack.events.message("still there?", user="U7")
            await slack.wait_for_ack(await slack.push_event(event))
            await slack.wait_until(lambda: bool(bot_posts(slack, "D7")), what="answer")
            assert running.link is not None and running.link.failure is None


async def test_the_process_healthz_is_not_ready_while_down_and_metrics_count_it(
    tmp_path: Path,
) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        env = socket_mode_env(
            slack,
            claude,
            SELFMIND_METRICS_PORT="0",
            SELFMIND_RECONNECT_BACKOFF_S="0.2",
            SELFMIND_RECONNECT_BACKOFF_MAX_S="0.4",
        )
        bot = await BotProcess.start(tmp_path / "m.db", env, tmp_path)
        try:
            (port,) = {int(m.group(1)) for line in bot.lines if (m := HEALTH_LINE.search(line))}
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/healthz") as resp:
                    assert resp.status == 200
                # Every handshake refused until the test lets one in: down for a while.
                slack.refuse_sockets()
                await slack.drop_sockets(abrupt=True)
                await poll(lambda: slack.sockets_refused >= 2)
                await asyncio.sleep(0.8)
                async with http.get(f"{base}/healthz") as resp:
                    assert resp.status == 503
                    report = json.loads(await resp.text())
                assert report["not_ready"] == ["platform"], report
                assert report["platform"]["down_s"] >= 0.5, report
                slack.accept_sockets()
                await slack.wait_for_socket(connections=2, timeout_s=30)
                for _ in range(100):
                    async with http.get(f"{base}/healthz") as resp:
                        if resp.status == 200:
                            break
                    await asyncio.sleep(0.05)
                assert resp.status == 200
                async with http.get(f"{base}/metrics") as resp:
                    metrics = await resp.text()
            assert "selfmind_platform_reconnects_total 1.0" in metrics, metrics
            assert await bot.stop() == 0
        finally:
            bot.kill()


async def test_an_event_acked_just_before_a_drop_is_answered_and_bad_frames_are_ignored(
    tmp_path: Path,
) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True
        settings = slack_settings(
            slack, claude, tmp_path / "m.db", slack_signing_secret=None, reconnect_backoff_s=0.05
        )
        async with running_bot(settings, http=False) as running:
            await slack.wait_for_socket()
            # Bad input on the socket: not JSON, not an object, an unknown envelope type,
            # a huge unicode one: ignored, the connection stays.
            socket = slack._sockets[-1]
            await socket.send_str("not json \x00")
            await socket.send_str("[1, 2]")
            await socket.send_json({"envelope_id": "E-odd", "type": "nonsense", "payload": {}})
            await socket.send_json({"type": "hello", "note": "é" * 100_000})
            event = slack.events.message("acked then dropped", user="U8")
            envelope_id = await slack.push_event(event)
            await slack.wait_for_ack(envelope_id)
            await slack.drop_sockets(abrupt=True)  # the answer streams over the Web API
            await slack.wait_for_socket(connections=2)
            await slack.wait_until(lambda: bool(bot_posts(slack, "D8")), what="answer")
            await asyncio.sleep(0.5)
            assert len(bot_posts(slack, "D8")) == 1
            assert not slack.redelivered  # it was acknowledged: nothing to redeliver
            assert slack.socket_connections == 2
            assert running.runtime.readiness.reconnects == 1
