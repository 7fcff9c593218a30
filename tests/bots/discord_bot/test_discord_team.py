"""Team memory on Discord, against the fake gateway and REST API, on both backends:
``/memories channel on`` needs Manage Channels and is announced; a decision learned in a
guild channel is in a later member's prompt there and in its threads, never in another
channel, another guild or a DM; listing, forget and undo."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import discord
import pytest

from bots.discord_bot.client import SelfMindBot
from tests.core.memory.test_team import OWNER, PG16, QUESTION, team_reply
from tests.discord_helpers import World, command, running_bot, settled, world
from tests.loop_helpers import memories_reply


@pytest.fixture
async def w(tmp_path: Path, db_url: str) -> AsyncIterator[World]:
    async with world(tmp_path) as w:
        w.db = db_url  # type: ignore[assignment]  # the store on either backend
        yield w


async def ask(
    w: World, bot: SelfMindBot, channel: int, author: Any, text: str, extract: Any = None
) -> str:
    """Mention the bot in ``channel`` (or write in a DM); the answered prompt's system."""
    before = len(w.claude.requests_of("chat"))
    w.claude.enqueue("Noted.", kind="chat")
    w.claude.enqueue(extract or memories_reply(), kind="extract")
    is_dm = channel == w.discord.dm_channel_id(author)
    content = text if is_dm else f"{w.discord.bot_user.mention} {text}"
    await w.discord.dispatch_message(channel, author, content)
    await settled(w, bot, chats=before + 1)
    return "\n".join(str(b["text"]) for b in w.claude.requests_of("chat")[-1].body["system"])


async def test_team_memory_on_discord(w: World) -> None:
    fake = w.discord
    channel = fake.channel_id
    guild = fake.guild_id_of(channel)
    assert guild is not None
    other_channel = fake.add_text_channel(guild, "random")
    thread = fake.add_thread(channel, "billing")
    guild_b = fake.add_guild("elsewhere", owner=w.alice)
    fake.add_member(guild_b, w.bob)
    channel_b = fake.add_text_channel(guild_b, "general")
    async with running_bot(w) as bot:
        # Without Manage Channels: refused to the caller only, nothing changes.
        no_perm = discord.Permissions.all()
        no_perm.manage_channels = False
        asked = await fake.dispatch_slash_command(
            "memories channel on", user=w.bob, channel_id=channel, permissions=no_perm.value
        )
        refused = await fake.wait_for_interaction_response(asked)
        assert refused.ephemeral and "Manage Channels" in (refused.content or "")
        _, on = await command(fake, "memories channel on", w.alice, channel_id=channel)
        assert not on.ephemeral and "turned this channel's memory on" in (on.content or "")
        decision = "we use PostgreSQL 16 for billing; Bob owns the migration"
        await ask(w, bot, channel, w.alice, decision, extract=team_reply(PG16, OWNER))
        later = await ask(w, bot, channel, w.bob, QUESTION)
        in_thread = await ask(w, bot, thread, w.bob, QUESTION)
        elsewhere = await ask(w, bot, other_channel, w.bob, QUESTION)
        other_guild = await ask(w, bot, channel_b, w.bob, QUESTION)
        direct = await ask(w, bot, fake.dm_channel_id(w.bob), w.bob, QUESTION)
        assert PG16 in later and OWNER in later and PG16 in in_thread
        for text in (elsewhere, other_guild, direct):
            assert PG16 not in text
        _, listing = await command(fake, "memories channel list", w.bob, channel_id=channel)
        assert listing.ephemeral and PG16 in (listing.content or "")
        entry = next(x for x in (listing.content or "").splitlines() if PG16 in x)
        entry_id = int(entry.split()[0].lstrip("#"))
        _, gone = await command(
            fake, "memories channel forget", w.bob, entry=entry_id, channel_id=channel
        )
        assert not gone.ephemeral and "Bob took" in (gone.content or "")
        token = (gone.content or "").rsplit("undo ", 1)[1].strip("`")
        assert PG16 not in await ask(w, bot, channel, w.bob, QUESTION)
        _, wrong = await command(
            fake, "memories channel undo", w.bob, token=token, channel_id=other_channel
        )
        assert wrong.ephemeral and "another channel" in (wrong.content or "")
        _, back = await command(
            fake, "memories channel undo", w.alice, token=token, channel_id=channel
        )
        assert not back.ephemeral and "undid a change" in (back.content or "")
        assert PG16 in await ask(w, bot, channel, w.bob, QUESTION)
        _, in_dm = await command(
            fake, "memories channel list", w.bob, channel_id=fake.dm_channel_id(w.bob)
        )
        assert in_dm.ephemeral and "only for channels" in (in_dm.content or "")
        _, off = await command(fake, "memories channel off", w.alice, channel_id=channel)
        assert not off.ephemeral and "memory off" in (off.content or "")
        assert PG16 not in await ask(w, bot, channel, w.bob, QUESTION)
