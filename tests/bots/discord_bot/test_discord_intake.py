"""Discord cannot redeliver a message or a command: when one cannot be stored (the database
file full, its write lock held past the busy timeout), the user is told in one sentence that
it was not saved, and nothing is answered. The real discord.py bot against the fakes."""

from __future__ import annotations

import sqlite3

from bots.discord_bot.client import SelfMindBot
from core.errors import NOT_SAVED, NOT_SAVED_COMMAND
from core.store.sqlite.store import SQLiteStore
from tests.discord_helpers import World, command, eventually, key, running_bot, settled
from tests.store_helpers import fill_disk, free_disk


def store_of(bot: SelfMindBot) -> SQLiteStore:
    store = bot.rt.store
    assert isinstance(store, SQLiteStore)
    return store


async def test_a_message_that_cannot_be_stored_is_answered_not_saved(w: World) -> None:
    dm = w.discord.dm_channel_id(w.alice)
    w.claude.enqueue("Noted.", kind="chat")
    async with running_bot(w) as bot:
        store = store_of(bot)
        await fill_disk(store)
        await w.discord.dispatch_message(dm, w.alice, "my plan: " + "details " * 1500)
        await eventually(lambda: NOT_SAVED in w.bot_texts(dm), what="the not-saved sentence")
        assert await bot.wait_idle(5)
        assert w.claude.requests_of("chat") == []
        await free_disk(store)
        # Space again: the user sends it again and it is answered.
        await w.discord.dispatch_message(dm, w.alice, "my plan, again")
        await settled(w, bot, chats=1)
    assert w.bot_texts(dm).count(NOT_SAVED) == 1
    assert w.bot_texts(dm)[-1] == "Noted."


async def test_a_command_that_cannot_be_stored_says_so(w: World) -> None:
    async with running_bot(w) as bot:
        await store_of(bot)._conn.execute("PRAGMA busy_timeout = 200")
        other = sqlite3.connect(w.db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process (an import) holds the write lock
        try:
            _, response = await command(
                w.discord, "remember", w.alice, text="I am allergic to peanuts."
            )
        finally:
            other.rollback()
            other.close()
        assert (response.content, response.ephemeral) == (NOT_SAVED_COMMAND, True)
        assert await bot.rt.service.count(user_key=key(w.alice)) == 0
