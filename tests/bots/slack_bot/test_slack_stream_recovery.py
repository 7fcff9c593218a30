"""A ``selfmind slack --http`` process SIGKILLed in the middle of a native stream, then
restarted on the same database: the stream it left (no metadata: chat.startStream takes
none) was recorded with the turn when chat.startStream returned, so the start-up recovery
stops it and edits it into the whole answer. The fake shows one answer for the message."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from core.store.sqlite.store import SQLiteStore
from tests.bots.slack_bot.test_slack_process import bot_env, fakes
from tests.crash_helpers import start_bot
from tests.fakes.anthropic_server import Reply
from tests.slack_helpers import TEAM, bot_posts, shown_text

WHOLE = "Here is the whole rollout plan: stage, canary, everyone."


@pytest.mark.slow
async def test_sigkill_mid_stream_leaves_one_whole_answer_after_the_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "memory.db"
    async with fakes() as (slack, claude):
        env = bot_env(slack, claude)
        bot = await start_bot(db, env, tmp_path)
        long_answer = " ".join(f"step{i} of the plan." for i in range(300))
        claude.enqueue(Reply(text=long_answer, chunk_size=8, chunk_delay_s=0.02), kind="chat")
        mention = slack.events.app_mention(f"{slack.identity.mention} the rollout plan?", user="U1")
        sent = await slack.send_event(bot.url, mention, event_id="EvSTREAM")
        assert sent.status == 200  # acknowledged: Slack will not send it again
        await slack.wait_for_call("chat.appendStream", count=2, timeout_s=20)
        assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
        (cut,) = bot_posts(slack, "C0GENERAL", mention["ts"])
        assert cut["streaming"] is True and "metadata" not in cut  # cut mid-stream
        assert slack.calls("chat.startStream")[0].response["ts"] == cut["ts"]

        claude.enqueue(WHOLE, kind="chat")
        bot = await start_bot(db, env, tmp_path)
        await slack.wait_until(
            lambda: any(shown_text(p) == WHOLE for p in bot_posts(slack, "C0GENERAL")),
            what="the answer after the restart",
            timeout_s=20,
        )
        await asyncio.sleep(0.5)
        assert await bot.stop() == 0
        assert any("stopped a stream a crash left open" in line for line in bot.stderr)

    (answer,) = bot_posts(slack, "C0GENERAL", mention["ts"])  # one answer, not two
    assert answer["ts"] == cut["ts"]  # the cut stream, completed in place
    assert shown_text(answer) == WHOLE and answer["streaming"] is False
    assert answer["metadata"]["event_payload"] == {"answers_ts": mention["ts"]}
    assert any(b["type"] == "context_actions" for b in answer["blocks"])  # feedback buttons
    assert len(claude.requests_of("chat")) == 2
    store = await SQLiteStore.open(str(db))
    try:
        turns = await store.recent_turns(
            conversation_key=f"slack:{TEAM}:C0GENERAL:{mention['ts']}", limit=10
        )
    finally:
        await store.close()
    assert [(t.role, t.text) for t in turns] == [
        ("user", "the rollout plan?"),
        ("assistant", WHOLE),
    ]
