"""``selfmind slack --http`` as a real separate process, restarted on the same database.

The fakes run in the test; the bot finds them through SLACK_API_URL and ANTHROPIC_BASE_URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.runtime import open_store
from core.store.sqlite.store import SQLiteStore
from tests.crash_helpers import recovery_streaming, start_bot
from tests.fakes.anthropic_server import (
    FakeAnthropic,
    Reply,
    running_fake_anthropic,
)
from tests.fakes.slack_server import FakeSlack, running_fake_slack
from tests.loop_helpers import memories_reply, memory_lines, memory_text
from tests.slack_helpers import PREFERENCE, TEAM, bot_posts, key, slack_process_env, system_text


def bot_env(slack: FakeSlack, claude: FakeAnthropic, **extra: str) -> dict[str, str]:
    return slack_process_env(slack, claude.base_url, **extra)


@contextlib.asynccontextmanager
async def fakes() -> AsyncIterator[tuple[FakeSlack, FakeAnthropic]]:
    async with (
        running_fake_slack() as slack,
        running_fake_anthropic(chunk_size=6, chunk_delay_s=0.02) as claude,
    ):
        yield slack, claude


@pytest.mark.slow
async def test_must_show_dm_memory_survives_restart_for_its_user_only(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with fakes() as (slack, claude):
        env = bot_env(slack, claude)
        started = time.monotonic()
        bot = await start_bot(db, env, tmp_path)
        assert time.monotonic() - started < 15
        answer = "Understood: from now on I will answer you in short bullet points."
        claude.enqueue(answer, kind="chat")
        claude.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
        said = slack.events.message("I prefer answers in bullet points", user="U1")
        sent = await slack.send_event(bot.url, said)
        assert sent.status == 200
        await slack.wait_until(
            lambda: any(p["text"].endswith(answer) for p in bot_posts(slack, "D1")),
            what="the streamed answer",
            timeout_s=20,
        )
        await slack.wait_until(lambda: bool(slack.ephemerals), what="memory note", timeout_s=20)
        (reply,) = bot_posts(slack, "D1")
        edits = [c for c in slack.calls("chat.update") if c.params["ts"] == reply["ts"]]
        assert len(edits) >= 3  # the reply streamed by edits
        assert PREFERENCE in slack.ephemerals[0]["text"]
        assert await bot.stop() == 0
        assert any("slack bot stopped" in line for line in bot.stderr)

        store = await SQLiteStore.open(str(db))
        try:
            u1 = await store.list_memories(user_key=key("U1"))
            assert [(m.text, m.origin) for m in u1] == [(PREFERENCE, "private")]
            assert await store.list_memories(user_key=key("U2")) == []
        finally:
            await store.close()

        bot = await start_bot(db, env, tmp_path)  # the restart
        question = "How should answers look for me?"
        for user in ("U1", "U2"):
            await slack.send_event(bot.url, slack.events.message(question, user=user))
            dm = f"D{user[1:]}"
            await slack.wait_until(
                lambda dm=dm: any(question in p["text"] for p in bot_posts(slack, dm)),
                what=f"answer to {user}",
                timeout_s=20,
            )
        u1_request, u2_request = claude.requests_of("chat")[-2:]
        u1_memories = memory_lines(memory_text(u1_request.body))
        assert len(u1_memories) == 1 and PREFERENCE in u1_memories[0]
        assert "I prefer answers in bullet points" in str(u1_request.body["messages"][0])
        assert memory_lines(memory_text(u2_request.body)) == []
        assert "bullet" not in str(u2_request.body["messages"]) + system_text(claude, -1)

        mention = slack.events.app_mention(f"{slack.identity.mention} {question}", user="U1")
        await slack.send_event(bot.url, mention)
        await slack.wait_until(
            lambda: any(
                question in p["text"] for p in bot_posts(slack, "C0GENERAL", mention["ts"])
            ),
            what="thread answer",
            timeout_s=20,
        )
        assert "This is a Slack channel thread." in system_text(claude)
        assert memory_lines(system_text(claude)) == []  # the DM-learned memory stays private
        assert await bot.stop() == 0


@pytest.mark.slow
async def test_sigkill_mid_answer_then_a_retry_is_answered_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with fakes() as (slack, claude):
        env = bot_env(slack, claude)
        bot = await start_bot(db, env, tmp_path)
        long_answer = " ".join(f"step{i}" for i in range(400))
        claude.enqueue(Reply(text=long_answer, chunk_size=4, chunk_delay_s=0.05), kind="chat")
        said = slack.events.message("Walk me through the migration", user="U1")
        envelope = slack.events.event_callback(said, event_id="EvKILLED")
        await slack.send_event(bot.url, envelope)
        await slack.wait_until(
            lambda: len(slack.calls("chat.update")) >= 2, what="a partial answer", timeout_s=20
        )
        assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL

        bot = await start_bot(db, env, tmp_path)
        claude.enqueue("Here is the whole walk-through.", kind="chat")
        await slack.send_event(bot.url, envelope, retry_num=1, retry_reason="http_timeout")
        await slack.wait_until(
            lambda: any(p["text"].endswith("walk-through.") for p in bot_posts(slack, "D1")),
            what="the answer after the restart",
            timeout_s=20,
        )
        await slack.send_event(bot.url, envelope, retry_num=2, retry_reason="http_timeout")
        await asyncio.sleep(0.5)
        assert await bot.stop() == 0
        assert any(
            "answering an interrupted message" in line or "left unanswered by a crash" in line
            for line in bot.stderr
        )
    assert len(claude.requests_of("chat")) == 2  # the interrupted one and the answer
    store = await SQLiteStore.open(str(db))
    try:
        turns = await store.recent_turns(conversation_key=f"slack:{TEAM}:D1", limit=10)
    finally:
        await store.close()
    assert [(t.role, t.text) for t in turns] == [
        ("user", "Walk me through the migration"),
        ("assistant", "Here is the whole walk-through."),
    ]


@pytest.mark.slow
async def test_sigkill_mid_answer_is_answered_at_start_up_without_a_retry(
    tmp_path: Path,
) -> None:
    """Slack does not redeliver an acknowledged event: the next start-up answers it."""
    db = tmp_path / "memory.db"
    async with fakes() as (slack, claude):
        env = bot_env(slack, claude)
        bot = await start_bot(db, env, tmp_path)
        long_answer = " ".join(f"step{i}" for i in range(400))
        claude.enqueue(Reply(text=long_answer, chunk_size=4, chunk_delay_s=0.05), kind="chat")
        said = slack.events.message("Explain the rollout plan", user="U1")
        response = await slack.send_event(bot.url, said, event_id="EvACKED")
        assert response.status == 200  # acknowledged: Slack will not send it again
        await slack.wait_until(
            lambda: len(slack.calls("chat.update")) >= 1, what="a partial answer", timeout_s=20
        )
        assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL

        claude.enqueue("Here is the rollout plan.", kind="chat")
        bot = await start_bot(db, env, tmp_path)
        await slack.wait_until(
            lambda: any(p["text"].endswith("rollout plan.") for p in bot_posts(slack, "D1")),
            what="the answer after the restart",
            timeout_s=20,
        )
        await asyncio.sleep(0.5)
        assert await bot.stop() == 0
        # A second restart finds nothing left to answer.
        bot = await start_bot(db, env, tmp_path)
        await asyncio.sleep(0.5)
        assert await bot.stop() == 0
    finals = [p for p in bot_posts(slack, "D1") if p["text"].endswith("rollout plan.")]
    assert len(finals) == 1
    assert len(claude.requests_of("chat")) == 2


@pytest.mark.slow
async def test_a_recovery_killed_too_is_recovered_at_the_next_start_and_shown_once(
    tmp_path: Path, db_url: str
) -> None:
    """The double crash, on both backends: killed mid-answer, killed again while the start-up
    recovery streams, started a third time: one whole answer on screen and in the store."""
    db = db_url
    long_answer = " ".join(f"step{i}" for i in range(400))
    async with fakes() as (slack, claude):
        env = bot_env(slack, claude)
        bot = await start_bot(db, env, tmp_path)
        claude.enqueue(Reply(text=long_answer, chunk_size=4, chunk_delay_s=0.05), kind="chat")
        response = await slack.send_event(bot.url, slack.events.message("Explain the rollout"))
        assert response.status == 200  # acknowledged: Slack will not send it again
        await slack.wait_until(
            lambda: len(slack.calls("chat.update")) >= 1, what="a partial answer", timeout_s=20
        )
        assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL

        claude.enqueue(Reply(text=long_answer, chunk_size=4, chunk_delay_s=0.05), kind="chat")
        bot = await start_bot(db, env, tmp_path)
        await recovery_streaming(slack, claude, chat_calls=2)
        assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL

        claude.enqueue("Here is the rollout plan.", kind="chat")
        bot = await start_bot(db, env, tmp_path)
        await slack.wait_until(
            lambda: any(p["text"].endswith("rollout plan.") for p in bot_posts(slack, "D0USER")),
            what="the answer after the second restart",
            timeout_s=30,
        )
        await asyncio.sleep(0.5)
        assert await bot.stop() == 0
    posts = [p for p in bot_posts(slack, "D0USER") if p["text"].strip()]
    assert len(posts) == 1 and posts[0]["text"].endswith("Here is the rollout plan.")
    assert "step" not in posts[0]["text"] and "still writing" not in posts[0]["text"]
    assert len(claude.requests_of("chat")) == 3
    store = await open_store(db)
    try:
        turns = await store.recent_turns(conversation_key=f"slack:{TEAM}:D0USER", limit=10)
    finally:
        await store.close()
    assert [(t.role, t.text) for t in turns] == [
        ("user", "Explain the rollout"),
        ("assistant", "Here is the rollout plan."),
    ]


@pytest.mark.slow
async def test_a_wrong_token_stops_start_up_with_one_line(tmp_path: Path) -> None:
    async with fakes() as (slack, claude):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "bots.cli", "--db", str(tmp_path / "m.db"), "slack", "--http"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,
            env=bot_env(slack, claude, SLACK_BOT_TOKEN="xoxb-wrong"),
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert out == b""
    assert err.decode().splitlines() == [
        "error: SLACK_BOT_TOKEN was refused by Slack (invalid_auth)"
    ]


@pytest.mark.slow
async def test_sigterm_lets_the_answer_in_flight_finish_and_its_reflection_run(
    tmp_path: Path,
) -> None:
    db = tmp_path / "memory.db"
    async with fakes() as (slack, claude):
        bot = await start_bot(db, bot_env(slack, claude), tmp_path)
        answer = " ".join(f"point{i}" for i in range(60))
        claude.enqueue(Reply(text=answer, chunk_size=8, chunk_delay_s=0.03), kind="chat")
        claude.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
        await slack.send_event(bot.url, slack.events.message("Bullet points, please", user="U1"))
        await slack.wait_until(
            lambda: len(slack.calls("chat.update")) >= 1, what="a partial answer", timeout_s=20
        )
        assert await bot.stop(signal.SIGTERM) == 0
        (reply,) = bot_posts(slack, "D1")
        assert reply["text"].endswith(answer)  # finished, not cut off
        assert claude.requests_of("extract")  # the reflection ran before exit
    store = await SQLiteStore.open(str(db))
    try:
        assert [m.text for m in await store.list_memories(user_key=key("U1"))] == [PREFERENCE]
    finally:
        await store.close()
