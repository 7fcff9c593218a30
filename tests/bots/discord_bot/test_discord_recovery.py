"""Discord gets what Slack has (:mod:`core.chat.intake`): a message in flight when the
process dies is answered exactly once after the restart, in place of the part the crash
left on screen, and an answer is stored only once Discord shows it whole.

Discord never redelivers a message: the start-up recovery answers what the store holds
without an answer (within ``RECOVERY_WINDOW``). The real bot (a ``selfmind discord`` child
process for the SIGKILL, in process for the failed final edit) against the fakes."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.crash_helpers import stored_turns as read_turns
from tests.discord_helpers import (
    START_S,
    World,
    bot_process,
    eventually,
    running_bot,
    stop,
    world,
)
from tests.fakes.anthropic_server import Reply

QUESTION = "walk me through the migration"
CUT = " ".join(f"step{i} is to check the tables once more." for i in range(40))
WHOLE = "Here is the whole walk-through: back up, migrate, verify."


def stored_turns(w: World) -> list[tuple[str, str]]:
    """(role, text) of every stored turn, oldest first (read from the database file)."""
    with sqlite3.connect(w.db) as db:
        rows = db.execute("SELECT role, text FROM turns ORDER BY id").fetchall()
    return [(str(r), str(t)) for r, t in rows]


async def answer_stored(db: str) -> None:
    """Wait until the store of ``db`` (either backend) holds the answer."""
    async with asyncio.timeout(START_S):
        while True:
            if ("assistant", WHOLE) in await read_turns(db):
                return
            await asyncio.sleep(0.05)


def replies_to(w: World, channel: int, message_id: str) -> list[dict[str, Any]]:
    """The bot's messages in ``channel`` that reply to ``message_id``."""
    return [
        m
        for m in w.bot_posts(channel)
        if (m.get("message_reference") or {}).get("message_id") == message_id
    ]


def finished(text: str) -> bool:
    return not any(marker in text for marker in ("thinking…", "writing"))


@pytest.mark.slow
async def test_sigkill_mid_answer_is_answered_once_in_place_after_the_restart(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        fake, claude = w.discord, w.claude
        channel = fake.channel_id
        log_path = tmp_path / "bot.log"
        with log_path.open("wb") as log:
            first = await bot_process(w, log)
            try:
                await fake.wait_for_session(count=1, timeout_s=START_S)
                # A slow streamed answer: about 40 deltas, a quarter second apart.
                claude.enqueue(Reply(text=CUT, chunk_size=40, chunk_delay_s=0.25), kind="chat")
                asked = await fake.dispatch_message(
                    channel, w.alice, f"{fake.bot_user.mention} {QUESTION}"
                )
                await fake.wait_for_request(
                    "PATCH", f"/channels/{channel}/messages/*", count=2, timeout_s=START_S
                )
            finally:
                first.send_signal(signal.SIGKILL)
                assert await first.wait() == -signal.SIGKILL
            cut = replies_to(w, channel, asked["id"])
            assert len(cut) == 1 and not finished(cut[0]["content"])  # cut mid-answer
            assert stored_turns(w) == [("user", QUESTION)]  # not answered: shown only in part
            posts_before = len(fake.find_requests("POST", f"/channels/{channel}/messages"))

            claude.enqueue(WHOLE, kind="chat")
            second = await bot_process(w, log)
            try:
                await fake.wait_for_session(count=2, timeout_s=START_S)
                await eventually(
                    lambda: [m["content"] for m in w.bot_posts(channel)] == [WHOLE],
                    timeout_s=START_S,
                    what="the cut answer completed in place",
                )
                await eventually(lambda: ("assistant", WHOLE) in stored_turns(w), timeout_s=START_S)
            finally:
                assert await stop(second) == 0
            # A third start finds nothing left to answer.
            third = await bot_process(w, log)
            try:
                await fake.wait_for_session(count=3, timeout_s=START_S)
            finally:
                assert await stop(third) == 0

        log_text = log_path.read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in log_text, log_text[-3000:]
        assert "left unanswered by a crash" in log_text
        # Exactly once: one answer message (the one the crash cut, edited), no second post.
        assert [m["id"] for m in replies_to(w, channel, asked["id"])] == [cut[0]["id"]]
        assert len(fake.find_requests("POST", f"/channels/{channel}/messages")) == posts_before
        assert len(claude.requests_of("chat")) == 2  # the cut one and the answer
        assert stored_turns(w) == [("user", QUESTION), ("assistant", WHOLE)]


async def test_an_answer_whose_final_edit_fails_is_stored_only_when_shown(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        fake, claude = w.discord, w.claude
        dm = fake.dm_channel_id(w.alice)
        claude.enqueue(Reply(text=CUT, chunk_size=200, chunk_delay_s=0.05), kind="chat")
        async with running_bot(w) as bot:
            # Discord refuses every edit: the answer never shows whole.
            fake.fail_next("PATCH", f"/channels/{dm}/messages/*", status=400, times=1000)
            asked = await fake.dispatch_message(dm, w.alice, QUESTION)
            await eventually(lambda: replies_to(w, dm, asked["id"]), what="the first part")
            assert await bot.wait_idle(START_S)
            assert stored_turns(w) == [("user", QUESTION)]  # shown in part: not stored
            fake.clear_faults()  # Discord takes edits again
        claude.enqueue(WHOLE, kind="chat")
        async with running_bot(w) as bot:  # the restart answers it, in place
            await eventually(
                lambda: ("assistant", WHOLE) in stored_turns(w), what="the answer stored"
            )
            assert await bot.wait_idle(START_S)
        answers = replies_to(w, dm, asked["id"])
        assert [m["content"] for m in answers] == [WHOLE]
        assert WHOLE not in [m["content"] for m in w.bot_posts(dm) if m not in answers]
        assert stored_turns(w) == [("user", QUESTION), ("assistant", WHOLE)]
        assert len(claude.requests_of("chat")) == 2


@pytest.mark.slow
async def test_a_recovery_killed_too_is_recovered_at_the_next_start_in_place(
    tmp_path: Path, db_url: str
) -> None:
    """The double crash, on both backends: killed mid-answer, killed again while the
    start-up recovery streams into the cut message, started a third time: one answer, in
    the message the first crash cut (the recovery's claim died with the process that held
    it)."""
    async with world(tmp_path) as w:
        fake, claude = w.discord, w.claude
        channel = fake.channel_id
        log_path = tmp_path / "bot.log"
        with log_path.open("wb") as log:
            first = await bot_process(w, log, db_url)
            try:
                await fake.wait_for_session(count=1, timeout_s=START_S)
                claude.enqueue(Reply(text=CUT, chunk_size=40, chunk_delay_s=0.25), kind="chat")
                asked = await fake.dispatch_message(
                    channel, w.alice, f"{fake.bot_user.mention} {QUESTION}"
                )
                await fake.wait_for_request(
                    "PATCH", f"/channels/{channel}/messages/*", count=2, timeout_s=START_S
                )
            finally:
                first.send_signal(signal.SIGKILL)
                assert await first.wait() == -signal.SIGKILL
            [cut] = replies_to(w, channel, asked["id"])
            edits = len(fake.find_requests("PATCH", f"/channels/{channel}/messages/*"))

            claude.enqueue(Reply(text=CUT, chunk_size=40, chunk_delay_s=0.25), kind="chat")
            second = await bot_process(w, log, db_url)
            try:
                await fake.wait_for_session(count=2, timeout_s=START_S)
                await fake.wait_for_request(  # the recovery streams into the cut message
                    "PATCH", f"/channels/{channel}/messages/*", count=edits + 2, timeout_s=START_S
                )
            finally:
                second.send_signal(signal.SIGKILL)
                assert await second.wait() == -signal.SIGKILL
            assert await read_turns(db_url) == [("user", QUESTION)]

            claude.enqueue(WHOLE, kind="chat")
            third = await bot_process(w, log, db_url)
            try:
                await fake.wait_for_session(count=3, timeout_s=START_S)
                await eventually(
                    lambda: [m["content"] for m in w.bot_posts(channel)] == [WHOLE],
                    timeout_s=START_S,
                    what="the cut answer completed in place",
                )
                await answer_stored(db_url)
            finally:
                assert await stop(third) == 0
        assert [m["id"] for m in replies_to(w, channel, asked["id"])] == [cut["id"]]
        assert len(claude.requests_of("chat")) == 3
        assert await read_turns(db_url) == [("user", QUESTION), ("assistant", WHOLE)]
