"""Where a Discord memory was learned decides where it is used (issue 35), on both
backends: a guild's fact never in another guild (Discord user ids are global: on main one
"shared" bucket served every server), a private channel's (``@everyone`` denied View
Channel) only in that channel and its threads, the DM sees all."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import discord

from bots.discord_bot.client import SelfMindBot
from bots.discord_bot.places import discord_place
from core.types import Place
from tests.discord_helpers import World, key, memory_block, running_bot, settled
from tests.loop_helpers import memories_reply, memory_lines

RECOVERY = "The user is in recovery from alcohol addiction."
FALCON = "The user leads Project Falcon."
VIEW_CHANNEL = discord.Permissions(view_channel=True).value


def asker(w: World, bot: SelfMindBot) -> Callable[[int, str], Awaitable[set[str]]]:
    """``say(channel_id, text)``: Alice says ``text`` there; once it is answered and
    reflected on, the memory lines of the prompt it was answered with."""
    asks = 0

    async def say(channel_id: int, text: str) -> set[str]:
        nonlocal asks
        asks += 1
        await w.discord.dispatch_message(channel_id, w.alice, text)
        await settled(w, bot, chats=asks)
        return set(memory_lines(memory_block(w)))

    return say


def make_private(w: World, channel_id: int) -> None:
    """Deny ``@everyone`` (the role whose id is the guild's) View Channel on the channel."""
    guild_id = w.discord.guild_id_of(channel_id)
    w.discord._channels[channel_id]["permission_overwrites"] = [
        {"id": str(guild_id), "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)}
    ]


async def test_a_discord_memory_stays_in_its_guild_and_its_private_channel(
    w: World, db_url: str
) -> None:
    fake = w.discord
    w = dataclasses.replace(w, db=db_url)  # type: ignore[arg-type]
    guild_a, general = fake.guild_id, fake.channel_id
    other = fake.add_text_channel(guild_a, "random")
    secret = fake.add_text_channel(guild_a, "recovery-circle")
    make_private(w, secret)
    guild_b = fake.add_guild("Public server")
    fake.add_member(guild_b, w.alice)
    elsewhere = fake.add_text_channel(guild_b, "lobby")
    thread = fake.add_thread(secret, "check-in")
    public_thread = fake.add_thread(general, "falcon")
    mention = fake.bot_user.mention
    async with running_bot(w) as bot:
        say = asker(w, bot)
        w.claude.enqueue(memories_reply((FALCON, "fact", "general")), kind="extract")
        await say(general, f"{mention} I lead Project Falcon")
        w.claude.enqueue(memories_reply((RECOVERY, "fact", "general")), kind="extract")
        await say(secret, f"{mention} I am in recovery")
        places = {
            m.text: m.place for m in await bot.rt.service.list_memories(user_key=key(w.alice))
        }
        assert places == {
            FALCON: Place("discord", "public_channel", str(guild_a), str(general)),
            RECOVERY: Place("discord", "private_channel", str(guild_a), str(secret)),
        }
        question = f"{mention} what do you remember about me?"
        assert await say(elsewhere, question) == set()  # guild B: nothing of guild A
        assert await say(other, question) == {FALCON}  # guild A's other public channel
        assert await say(thread, question) == {RECOVERY}  # the private channel's thread
        assert await say(public_thread, question) == {FALCON}
        dm = fake.dm_channel_id(w.alice)
        assert await say(dm, "what do you remember about me?") == {FALCON, RECOVERY}


def test_the_privacy_rule_reads_everyones_overwrite() -> None:
    """``discord_place`` on real discord.py objects: a forum post belongs to its forum, a
    private thread of a public channel is a place of its own, a guild whose @everyone
    lacks View Channel makes every channel without an overwrite private."""

    class Stub:
        def __init__(self, **kw: object) -> None:
            self.__dict__.update(kw)

    everyone_can = discord.Permissions(view_channel=True)
    role = Stub(permissions=everyone_can)
    guild = Stub(id=100, default_role=role)

    def channel(cid: int, denied: bool | None) -> Stub:
        overwrite = discord.PermissionOverwrite(view_channel=None if denied is None else not denied)
        return Stub(id=cid, guild=guild, overwrites_for=lambda _role: overwrite)

    public, private = channel(1, None), channel(2, True)
    assert discord_place(public, guild) == Place("discord", "public_channel", "100", "1")  # type: ignore[arg-type]
    assert discord_place(private, guild).kind == "private_channel"  # type: ignore[arg-type]
    assert discord_place(Stub(id=9), None) == Place("discord", "dm", None, "9")
    role.permissions = discord.Permissions(view_channel=False)
    assert discord_place(public, guild).kind == "private_channel"  # type: ignore[arg-type]
    assert discord_place(channel(3, False), guild).kind == "public_channel"  # type: ignore[arg-type]


async def test_a_private_thread_is_a_place_of_its_own_whatever_its_parent(
    w: World, db_url: str
) -> None:
    """Only the people invited read a private thread, even in a private channel: what is
    learned there is used there (and in the DM), not in its channel or the channel's other
    threads."""
    fake = w.discord
    w = dataclasses.replace(w, db=db_url)  # type: ignore[arg-type]
    general, secret = fake.channel_id, fake.add_text_channel(fake.guild_id, "leads")
    make_private(w, secret)
    hidden = {
        general: fake.add_thread(general, "one-to-one", private=True),
        secret: fake.add_thread(secret, "one-to-one", private=True),
    }
    mention = fake.bot_user.mention
    async with running_bot(w) as bot:
        say = asker(w, bot)
        question = f"{mention} what do you remember about me?"
        for parent, thread in hidden.items():
            w.claude.enqueue(memories_reply((RECOVERY, "fact", "general")), kind="extract")
            await say(thread, f"{mention} I am in recovery")
            [learned] = await bot.rt.service.list_memories(user_key=key(w.alice))
            assert learned.place == Place(
                "discord", "private_channel", str(fake.guild_id), str(thread)
            )
            assert await say(thread, question) == {RECOVERY}
            assert await say(parent, question) == set()
            other = fake.add_thread(parent, "everyone")
            assert await say(other, question) == set()
            assert await bot.rt.store.forget(user_key=key(w.alice), memory_id=learned.id)
