"""``selfmind slack --http`` SIGKILLed mid-answer where the start-up recovery used to miss the
place: a DM *thread* (the conversation key has no thread; the turn keeps it as
``thread_ref``, and the answer left on screen is found with ``conversations.replies``), and a
DM from a second workspace of an org-wide Enterprise Grid install (conversation keys carry
the install's id, the memory key's rule, so the recovery's prefix finds every workspace's
turns). Each is finished in the message the crash left, once: a second restart answers
nothing more."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from core.store.sqlite.store import SQLiteStore
from tests.bots.slack_bot.test_slack_process import bot_env
from tests.crash_helpers import BotProcess, start_bot
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.fakes.slack_server import BotIdentity, FakeSlack, JsonDict, running_fake_slack
from tests.slack_helpers import BOT_USER

WHOLE = "Here is the whole walk-through, in one message."
GRID = BotIdentity(team_id="T0WS1", enterprise_id="E0ORG", org_install=True)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["dm thread", "grid"])
async def test_sigkill_mid_answer_is_finished_in_place_once_after_the_restart(
    tmp_path: Path, where: str
) -> None:
    db = tmp_path / "memory.db"
    grid = where == "grid"
    async with (
        running_fake_slack(identity=GRID if grid else None) as slack,
        running_fake_anthropic(chunk_size=6, chunk_delay_s=0.02) as claude,
    ):
        env = bot_env(slack, claude, SELFMIND_SLACK_STREAMING="edits")  # "still writing…"
        started: list[BotProcess] = []

        async def launch() -> BotProcess:
            started.append(await start_bot(db, env, tmp_path))
            return started[-1]

        try:
            cut, root = await cut_and_recover(slack, claude, launch, grid=grid)
        finally:
            for process in started:  # a failed test leaves no bot running
                if process.proc.returncode is None:
                    process.proc.kill()
                    await process.proc.wait()

    (answer,) = answers(slack)  # one answer, in the message the crash left
    assert answer["ts"] == cut["ts"] and answer["text"].endswith(WHOLE)
    assert "still writing" not in answer["text"]
    assert answer.get("thread_ts") == (None if grid else root and root["ts"])
    assert len(claude.requests_of("chat")) == 2  # the interrupted one and the answer
    store = await SQLiteStore.open(str(db))
    try:
        team = "E0ORG" if grid else "T0SELFMIND"
        turns = await store.recent_turns(conversation_key=f"slack:{team}:D1", limit=10)
    finally:
        await store.close()
    assert [(t.role, t.text) for t in turns][-2:] == [
        ("user", "Walk me through the migration"),
        ("assistant", WHOLE),
    ]
    assert turns[-2].workspace == ("T0WS2" if grid else "T0SELFMIND")


async def cut_and_recover(
    slack: FakeSlack,
    claude: FakeAnthropic,
    launch: Callable[[], Awaitable[BotProcess]],
    *,
    grid: bool,
) -> tuple[JsonDict, JsonDict | None]:
    """Kill the bot mid-answer, restart it twice; the cut message and the thread's root."""
    bot = await launch()
    long_answer = " ".join(f"step{i}" for i in range(400))
    claude.enqueue(Reply(text=long_answer, chunk_size=4, chunk_delay_s=0.05), kind="chat")
    root = None if grid else slack.seed_message("D1", "start a thread", user="U1")
    said = slack.events.message(
        "Walk me through the migration",
        user="U1",
        thread_ts=root["ts"] if root else None,
    )
    envelope = slack.events.event_callback(said)
    if grid:
        envelope |= {"team_id": "T0WS2"}  # another workspace of the org
        envelope["event"]["team"] = "T0WS2"
    response = await slack.send_event(bot.url, envelope)
    assert response.status == 200  # acknowledged: Slack will not send it again
    await slack.wait_until(
        lambda: len(slack.calls("chat.update")) >= 2, what="a partial answer", timeout_s=20
    )
    assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
    (cut,) = answers(slack)
    assert "still writing" in cut["markdown_text"]

    claude.enqueue(WHOLE, kind="chat")
    bot = await launch()
    await slack.wait_until(
        lambda: any(p.get("text", "").endswith(WHOLE) for p in answers(slack)),
        what="the answer after the restart",
        timeout_s=20,
    )
    await asyncio.sleep(0.3)
    assert await bot.stop() == 0
    bot = await launch()  # nothing is left to answer
    await asyncio.sleep(0.5)
    assert await bot.stop() == 0
    return cut, root


def answers(slack: FakeSlack) -> list[JsonDict]:
    """The bot's messages in the DM (the thread's root is the user's)."""
    return [m for m in slack.messages("D1") if m.get("user") == BOT_USER]
