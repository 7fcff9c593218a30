"""A bot token Discord stops taking (Reset Token in the Developer Portal) ends the real
``selfmind discord`` process with one line naming the fix and exit code 1, whether Discord
says so on the gateway (close 4004, authentication failed) or on REST (401); a message
stored before the failure is answered, once, after a restart with the new token."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.discord_helpers import World, eventually, world
from tests.reconnect_helpers import DISCORD, BotProcess, discord_env

ANSWER_TIMEOUT_S = 30.0


def stored_turns(w: World) -> list[tuple[str, str]]:
    with sqlite3.connect(w.db) as db:
        rows = db.execute("SELECT role, text FROM turns ORDER BY id").fetchall()
    return [(str(r), str(t)) for r, t in rows]


def fix_lines(bot: BotProcess) -> list[str]:
    return [line for line in bot.lines if "DISCORD_BOT_TOKEN" in line]


async def test_gateway_close_4004_ends_the_process_with_one_line(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        fake = w.discord
        bot = await BotProcess.start(w.db, discord_env(w), tmp_path, DISCORD)
        try:
            # A message Discord sent just before the close: taken, not dropped on the way out.
            await fake.dispatch_message(
                fake.channel_id, w.alice, f"{fake.bot_user.mention} say just-before"
            )
            await fake.revoke_token()  # the live gateway is closed with 4004
            assert await bot.wait() == 1
        finally:
            bot.kill()
        (line,) = fix_lines(bot)
        assert line.startswith("error: ") and "4004" in line and "Reset Token" in line, line
        assert len(w.discord.identifies) == 1  # no reconnect loop on a refused token
        assert ("user", "say just-before") in stored_turns(w)

        again = await BotProcess.start(w.db, discord_env(w), tmp_path, DISCORD)  # new token
        try:
            await eventually(
                lambda: any("just-before" in t for t in w.bot_texts(fake.channel_id)),
                timeout_s=ANSWER_TIMEOUT_S,
                what="the message answered after the restart",
            )
            assert await again.stop() == 0
        finally:
            again.kill()
        assert sum("just-before" in t for t in w.bot_texts(fake.channel_id)) == 1


async def test_a_rest_401_ends_the_process_and_the_restart_answers_what_was_stored(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        fake = w.discord
        bot = await BotProcess.start(w.db, discord_env(w), tmp_path, DISCORD)
        try:
            await fake.revoke_token(close_gateway=False)  # REST says 401 from now on
            await fake.dispatch_message(
                fake.channel_id, w.alice, f"{fake.bot_user.mention} say stored-first"
            )
            assert await bot.wait() == 1
        finally:
            bot.kill()
        (line,) = fix_lines(bot)
        assert line.startswith("error: ") and "HTTP 401" in line, line
        assert "Traceback" not in "".join(bot.lines)  # the failed answer: one line, no trace
        assert ("user", "say stored-first") in stored_turns(w)  # stored, not lost
        assert not w.bot_texts(fake.channel_id)

        again = await BotProcess.start(w.db, discord_env(w), tmp_path, DISCORD)  # new token
        try:
            await eventually(
                lambda: any("stored-first" in t for t in w.bot_texts(fake.channel_id)),
                timeout_s=ANSWER_TIMEOUT_S,
                what="the stored message answered after the restart",
            )
            assert await again.stop() == 0
        finally:
            again.kill()
        assert sum("stored-first" in t for t in w.bot_texts(fake.channel_id)) == 1
        assert [r for r, _ in stored_turns(w)] == ["user", "assistant"]
