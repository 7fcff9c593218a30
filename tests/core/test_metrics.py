"""Health and metrics (``SELFMIND_METRICS_PORT``): ``/healthz`` and ``/metrics`` scraped over
real sockets while real test conversations run against the fake Slack, Discord and Claude."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from aiohttp import ClientSession
from prometheus_client.parser import text_string_to_metric_families

from bots.discord_bot.client import SelfMindBot, start_bot
from core.errors import ConfigError, ModelError
from core.health import HealthServer
from core.metrics import Metrics, Readiness, error_kind
from core.runtime import open_runtime
from core.store.database import database
from tests.conftest import REPO_ROOT
from tests.discord_helpers import World, eventually, settled, world
from tests.fakes.anthropic_server import (
    FakeAnthropic,
    Reply,
    cut_stream,
    not_json,
    overloaded,
    running_fake_anthropic,
)
from tests.fakes.slack_server import FakeSlack, running_fake_slack
from tests.loop_helpers import memories_reply
from tests.slack_helpers import PREFERENCE, TEAM, bot_posts, running_bot, settle, slack_settings

Sample = tuple[str, dict[str, str], float]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with running_fake_slack() as fake:
        yield fake


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=8) as fake:
        yield fake


@pytest.fixture
async def w(tmp_path: Path) -> AsyncIterator[World]:
    async with world(tmp_path) as w:
        yield w


async def get(port: int, path: str) -> tuple[int, str, str]:
    """(status, content type, body) of ``GET http://127.0.0.1:port/path``."""
    async with ClientSession() as http, http.get(f"http://127.0.0.1:{port}{path}") as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def health(port: int) -> tuple[int, dict[str, Any]]:
    async with ClientSession() as http, http.get(f"http://127.0.0.1:{port}/healthz") as r:
        return r.status, await r.json()


async def scrape(port: int) -> list[Sample]:
    """Every sample of ``/metrics``, parsed with prometheus_client's own parser."""
    status, content_type, text = await get(port, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=")
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels`` (0 if none)."""
    return sum(
        v for n, ls, v in samples if n == name and all(ls.get(k) == x for k, x in labels.items())
    )


def label_values(samples: list[Sample]) -> set[str]:
    return {v for _, labels, _ in samples for v in labels.values()}


def assert_no_private_labels(samples: list[Sample], *private: str) -> None:
    """No label value is, or contains, any of ``private`` (message text, user or team ids)."""
    values = label_values(samples)
    leaks = sorted(v for v in values for p in private if p.lower() in v.lower())
    assert leaks == []


# --- Slack HTTP mode


async def test_slack_http_conversation_moves_the_counters_and_both_healthz_agree(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    text = "Please remember I like bullet points"
    claude.enqueue("Noted, bullets it is.", kind="chat")
    claude.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
    settings = slack_settings(slack, claude, tmp_path / "m.db", metrics_port=0)
    async with running_bot(settings) as running:
        rt = running.runtime
        assert rt.health is not None
        port = rt.health.port
        before = await scrape(port)
        assert value(before, "selfmind_messages_received_total") == 0
        assert value(before, "selfmind_ready") == 1

        await slack.send_event(running.events_url, slack.events.message(text, user="U1"))
        await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="answer")
        await settle(running)
        assert rt.reflector is not None
        assert await rt.reflector.drain(10)

        after = await scrape(port)
        assert value(after, "selfmind_messages_received_total", platform="slack") == 1
        assert value(after, "selfmind_answer_latency_seconds_count") == 1
        assert value(after, "selfmind_answer_latency_seconds_sum") > 0
        for kind in ("input", "output"):
            assert value(after, "selfmind_claude_tokens_total", call="chat", kind=kind) > 0
            assert value(after, "selfmind_claude_tokens_total", call="reflection", kind=kind) > 0
        assert value(after, "selfmind_memories_stored_total", source="reflection") == 1
        assert value(after, "selfmind_reflection_queue_depth") == 0
        assert value(after, "selfmind_claude_errors_total") == 0
        # The dropped-recall-records series is exported, at 0 (the records themselves: see
        # test_profile.py, test_a_delivered_answer_records_the_memories_its_prompt_carried).
        assert ("selfmind_recall_records_dropped_total", {}, 0) in after
        assert_no_private_labels(after, text, "bullet", "U1", TEAM, PREFERENCE)
        words = {v for _, ls, _ in after for k, v in ls.items() if k != "le"}  # le: buckets
        assert words <= {"slack", "chat", "reflection", "input", "output"} | {
            "cache_read",
            "cache_write",
        }

        # The Slack port's own /healthz is the same readiness as the metrics port's.
        assert running.port is not None
        assert await health(running.port) == await health(port)
        status, body = await health(port)
        assert status == 200
        assert body["ready"] is True and body["not_ready"] == []
        assert body["platform"]["name"] == "slack" and body["store"] == {"open": True}
        assert (await get(port, "/nope"))[0] == 404
        assert (await get(port, "/metrics/extra"))[0] == 404


async def test_slack_claude_errors_and_failed_reflections_are_counted_by_kind(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    claude.enqueue(overloaded(), kind="chat", times=3)  # the SDK retries twice
    claude.enqueue(cut_stream("Half an ans", after_chunks=2), kind="chat")
    claude.enqueue(Reply(text="Fine."), kind="chat")
    claude.enqueue(not_json(), kind="extract", times=3)  # 3 attempts for the answered turn
    settings = slack_settings(
        slack, claude, tmp_path / "m.db", metrics_port=0, anthropic_max_retries=2
    )
    async with running_bot(settings) as running:
        rt = running.runtime
        assert rt.health is not None and rt.reflector is not None
        rt.reflector.retry_delay_s = 0.0
        for i, words in enumerate(("first question", "second question", "third question")):
            await slack.send_event(
                running.events_url, slack.events.message(words, user="U1"), event_id=f"Ev{i}"
            )
            await slack.wait_until(lambda i=i: len(bot_posts(slack, "D1")) > i, what="reply")
            await settle(running)
        assert await rt.reflector.drain(10)
        samples = await scrape(rt.health.port)

    assert value(samples, "selfmind_messages_received_total", platform="slack") == 3
    assert value(samples, "selfmind_claude_errors_total", kind="overloaded") == 1
    assert value(samples, "selfmind_claude_errors_total", kind="stream_cut") == 1
    # The failed answers are never reflected on; the answered one's reflection is malformed
    # three times and then skipped.
    assert value(samples, "selfmind_claude_errors_total", kind="malformed_output") == 3
    assert value(samples, "selfmind_reflections_failed_total") == 3
    assert value(samples, "selfmind_reflections_skipped_total") == 1
    assert value(samples, "selfmind_answer_latency_seconds_count") == 1  # one finished
    assert value(samples, "selfmind_memories_stored_total") == 0


async def test_slack_socket_mode_is_ready_once_connected(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(
        slack, claude, tmp_path / "m.db", slack_signing_secret=None, metrics_port=0
    )
    async with running_bot(settings, http=False) as running:
        await slack.wait_for_socket()
        assert running.runtime.health is not None
        port = running.runtime.health.port
        status, body = await health(port)
        assert (status, body["platform"]["connected"]) == (200, True)
        command = slack.events.slash_command("/remember", "The user likes tea.", user="U1")
        await slack.wait_for_ack(await slack.push_envelope("slash_commands", command))
        await slack.wait_for_response(command["response_url"])
        samples = await scrape(port)
        assert value(samples, "selfmind_memories_stored_total", source="remember") == 1
        assert_no_private_labels(samples, "tea", "U1", TEAM)
        # A readiness whose platform dropped answers 503 on the same server.
        running.runtime.readiness.disconnected("slack")
        status, body = await health(port)
        assert (status, body["not_ready"]) == (503, ["platform"])
        assert body["platform"]["down_s"] >= 0


# --- Discord


async def test_discord_healthz_503_until_ready_then_counters_move_and_a_drop_is_seen(
    w: World,
) -> None:
    fake = w.discord
    w.claude.enqueue("Hello Alice.", kind="chat")
    w.claude.enqueue(memories_reply(("The user is learning Rust.", "fact", "code")), kind="extract")
    settings = w.settings(metrics_port=0)
    async with open_runtime(
        settings,
        db_url=database(settings.db).url,
        require_model=True,
        start=False,
        serve_health=True,
    ) as rt:
        assert rt.health is not None and rt.reflector is not None
        port = rt.health.port
        status, body = await health(port)
        assert status == 503
        assert body["not_ready"] == ["platform"] and body["store"] == {"open": True}
        assert value(await scrape(port), "selfmind_ready") == 0

        bot = SelfMindBot(rt, guild_ready_timeout=0.05)
        runner = asyncio.create_task(start_bot(bot, fake.token))
        try:
            await asyncio.wait_for(bot.wait_until_ready(), 10)
            status, body = await health(port)
            assert (status, body["platform"]["name"]) == (200, "discord")

            mention = f"<@{fake.bot_user.id}> I am learning Rust these days"
            await fake.dispatch_message(fake.channel_id, w.alice, mention)
            await settled(w, bot, chats=1)
            samples = await scrape(port)
            assert value(samples, "selfmind_messages_received_total", platform="discord") == 1
            assert value(samples, "selfmind_answer_latency_seconds_count") == 1
            assert value(samples, "selfmind_claude_tokens_total", kind="output") > 0
            assert value(samples, "selfmind_memories_stored_total", source="reflection") == 1
            assert_no_private_labels(samples, "Rust", "Alice", str(w.alice.id), str(fake.guild_id))

            # The gateway drops and the client resumes: seen as one reconnect. (The drop is
            # shorter than a poll here; the 503 while down is checked in the Slack test.)
            await fake.disconnect(code=4000)
            await fake.wait_for_resume()
            await eventually(
                lambda: rt.readiness.reconnects == 1 and rt.readiness.is_connected,
                what="the resume seen by readiness",
            )
            status, body = await health(port)
            assert status == 200 and body["platform"]["reconnects"] == 1
            assert value(await scrape(port), "selfmind_platform_reconnects_total") == 1
        finally:
            await bot.close()
            await runner


async def test_remember_forget_and_forget_all_are_counted(w: World) -> None:
    settings = w.settings(metrics_port=0)
    async with open_runtime(settings, db_url=database(settings.db).url, serve_health=True) as rt:
        assert rt.health is not None
        key = f"discord:{w.alice.id}"
        for text in ("The user likes tea.", "The user owns a cat."):
            await rt.service.remember(user_key=key, text=text)
        first = await rt.service.list_memories(user_key=key)
        await rt.service.forget(user_key=key, memory_id=first[0].id)
        await rt.service.forget_all(user_key=key)
        samples = await scrape(rt.health.port)
    assert value(samples, "selfmind_memories_stored_total", source="remember") == 2
    assert value(samples, "selfmind_memories_forgotten_total") == 2


# --- bad input and isolation


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


async def test_port_in_use_is_a_one_line_config_error_and_the_store_is_closed(
    w: World, busy_port: int
) -> None:
    settings = w.settings(metrics_port=busy_port)
    with pytest.raises(ConfigError) as caught:
        async with open_runtime(settings, db_url=database(settings.db).url, serve_health=True):
            pytest.fail("started on a port in use")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"SELFMIND_METRICS_PORT: cannot listen on 127.0.0.1:{busy_port}")
    # Nothing is held: the same database opens again at once.
    async with open_runtime(
        settings.model_copy(update={"metrics_port": None}), db_url=database(settings.db).url
    ) as rt:
        assert rt.health is None


def test_selfmind_discord_with_the_metrics_port_in_use_exits_with_one_line(
    tmp_path: Path, busy_port: int
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SELFMIND_", "DISCORD_"))}
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        HOME=str(tmp_path),
        ANTHROPIC_API_KEY="sk-test",
        DISCORD_BOT_TOKEN="not-used",
        DISCORD_API_BASE_URL="http://127.0.0.1:9/api/v10",  # never reached
        SELFMIND_DB=str(tmp_path / "m.db"),
        SELFMIND_METRICS_PORT=str(busy_port),
        SELFMIND_LOG_LEVEL="WARNING",
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "selfmind"), "discord"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"error: SELFMIND_METRICS_PORT: cannot listen on 127.0.0.1:{busy_port}"
    )
    assert lines[0].endswith("(Address already in use); choose a free port or stop what holds it")


async def test_two_processes_worth_of_metrics_do_not_share_a_registry() -> None:
    one, two = Metrics.create(), Metrics.create()
    one.message_received("slack:T1:U1")
    one.memories_stored("remember", 3)
    readiness = Readiness()
    one.watch(readiness=readiness, queue_depth=lambda: 4, recall_drops=lambda: 2)
    server_one = await HealthServer.start(
        host="127.0.0.1", port=0, readiness=readiness, metrics=one
    )
    server_two = await HealthServer.start(
        host="127.0.0.1", port=0, readiness=Readiness(), metrics=two
    )
    try:
        a, b = await scrape(server_one.port), await scrape(server_two.port)
        status, body = await health(server_one.port)
    finally:
        await server_one.close()
        await server_two.close()
    assert value(a, "selfmind_messages_received_total", platform="slack") == 1
    assert value(a, "selfmind_memories_stored_total") == 3
    assert value(a, "selfmind_reflection_queue_depth") == 4
    assert value(a, "selfmind_recall_records_dropped_total") == 2
    assert value(b, "selfmind_messages_received_total") == 0
    assert status == 503 and body["not_ready"] == ["store", "platform"]


def test_disabled_metrics_record_nothing_and_never_import_prometheus_client() -> None:
    metrics = Metrics()
    metrics.message_received("cli:alice")
    metrics.memories_forgotten(2)
    error = ValueError("x")
    assert metrics.claude_error(error) is error
    assert metrics.registry is None and not metrics.enabled
    code = (
        "import sys, core.runtime, core.chat.loop, core.memory.service;"
        "print('prometheus_client' in sys.modules, 'aiohttp' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[0] == "False"


@pytest.mark.parametrize(
    ("user_key", "platform"),
    [
        ("slack:T1:U1", "slack"),
        ("discord:42", "discord"),
        ("cli:alice", "cli"),
        ("Alice", "other"),
        ("", "other"),
        ("slack", "slack"),
        ("evil\nlabel:x", "other"),
    ],
)
def test_only_the_platform_of_a_key_can_become_a_label(user_key: str, platform: str) -> None:
    metrics = Metrics.create()
    metrics.message_received(user_key)
    assert metrics.registry is not None
    assert (
        metrics.registry.get_sample_value(
            "selfmind_messages_received_total", {"platform": platform}
        )
        == 1
    )


_REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/messages")


def _status(cls: type[anthropic.APIStatusError], code: int, error_type: str | None = None) -> Any:
    body = {"type": "error", "error": {"type": error_type}} if error_type else None
    return cls("refused", response=httpx2.Response(code, request=_REQUEST), body=body)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (_status(anthropic.RateLimitError, 429, "rate_limit_error"), "rate_limit"),
        (_status(anthropic.InternalServerError, 529, "overloaded_error"), "overloaded"),
        (_status(anthropic.APIStatusError, 200, "overloaded_error"), "overloaded"),  # in-stream
        (_status(anthropic.InternalServerError, 500), "server"),
        (_status(anthropic.AuthenticationError, 401), "auth"),
        (_status(anthropic.BadRequestError, 400, "invalid_request_error"), "refused"),
        (anthropic.APITimeoutError(request=_REQUEST), "timeout"),
        (anthropic.APIConnectionError(request=_REQUEST), "connection"),
        (ValueError("odd"), "other"),
    ],
)
def test_error_kinds_follow_the_real_sdk_exceptions(error: Exception, kind: str) -> None:
    wrapped = ModelError("failed", user_message="x")
    assert error_kind(wrapped, error) == kind
    wrapped.__cause__ = (
        error  # as core.model.claude raises them: ``raise ModelError(...) from exc``
    )
    assert error_kind(wrapped) == kind
