"""``selfmind slack`` in Socket Mode as a real process, SIGKILLed twice, on both backends.

The envelope comes over the fake's websocket and is acknowledged there (Slack redelivers an
envelope the app did not acknowledge; an acknowledged one never comes back): the double
crash of :mod:`tests.bots.slack_bot.test_slack_process` (HTTP mode) in the other mode.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from core.chat.intake import RECOVERY_WINDOW
from tests.bots.slack_bot.test_slack_process import fakes
from tests.crash_helpers import recovery_streaming, stored_turns
from tests.fakes.anthropic_server import Reply
from tests.reconnect_helpers import BotProcess, socket_mode_env
from tests.slack_helpers import bot_posts

QUESTION = "Explain the rollout"
WHOLE = "Here is the rollout plan."
LONG = " ".join(f"step{i}" for i in range(400))


@pytest.mark.slow
async def test_socket_mode_a_recovery_killed_too_is_recovered_at_the_next_start_once(
    tmp_path: Path, db_url: str
) -> None:
    """Killed while the answer streams, killed again while the start-up recovery streams,
    started a third time: one whole answer on screen and in the store; the envelope was
    acknowledged once, after its message was stored, and never redelivered."""
    assert RECOVERY_WINDOW.total_seconds() > 60  # the three starts fit in it
    bots: list[BotProcess] = []
    async with fakes() as (slack, claude):
        slack.redeliver_unacked = True  # as Slack does: only an unacknowledged one returns
        env = socket_mode_env(slack, claude)
        try:
            bots.append(await BotProcess.start(db_url, env, tmp_path))
            claude.enqueue(Reply(text=LONG, chunk_size=4, chunk_delay_s=0.05), kind="chat")
            envelope = await slack.push_event(slack.events.message(QUESTION))
            await slack.wait_for_ack(envelope, timeout_s=20)
            assert await stored_turns(db_url) == [("user", QUESTION)]  # stored, then acked
            await slack.wait_until(  # the first edit may carry only the first-time notice
                lambda: any("step" in p["text"] for p in bot_posts(slack, "D0USER")),
                what="a partial answer",
                timeout_s=20,
            )
            bots[-1].kill()
            assert await bots[-1].wait() == -signal.SIGKILL
            cut = [p["ts"] for p in bot_posts(slack, "D0USER")]
            assert len(cut) == 1 and "step" in bot_posts(slack, "D0USER")[0]["text"]

            claude.enqueue(Reply(text=LONG, chunk_size=4, chunk_delay_s=0.05), kind="chat")
            bots.append(await BotProcess.start(db_url, env, tmp_path))
            await recovery_streaming(slack, claude, chat_calls=2)
            bots[-1].kill()
            assert await bots[-1].wait() == -signal.SIGKILL
            assert await stored_turns(db_url) == [("user", QUESTION)]  # not shown whole

            claude.enqueue(WHOLE, kind="chat")
            bots.append(await BotProcess.start(db_url, env, tmp_path))
            await slack.wait_until(
                lambda: any(p["text"].endswith(WHOLE) for p in bot_posts(slack, "D0USER")),
                what="the answer after the second restart",
                timeout_s=30,
            )
            assert await bots[-1].stop() == 0
        finally:
            for bot in bots:
                bot.kill()
    posts = [p for p in bot_posts(slack, "D0USER") if p["text"].strip()]
    assert [p["ts"] for p in posts] == cut  # the message the first crash cut, edited
    assert posts[0]["text"].endswith(WHOLE)
    assert "step" not in posts[0]["text"] and "still writing" not in posts[0]["text"]
    assert len(claude.requests_of("chat")) == 3
    assert [a["envelope_id"] for a in slack.acks] == [envelope]  # acknowledged once
    assert slack.redelivered == []
    assert await stored_turns(db_url) == [("user", QUESTION), ("assistant", WHOLE)]
    assert any("left unanswered by a crash" in line for bot in bots for line in bot.lines)
