"""The fake Discord, proved with the real discord.py 2.7 client over real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import discord
import pytest
from discord import app_commands

from tests.fakes.discord_server import (
    FLAG_EPHEMERAL,
    FLAG_LOADING,
    FakeDiscord,
    FakeUser,
    running_fake_discord,
)

WAIT_S = 5.0


class Bot(discord.Client):
    """A discord.py client that queues what it receives and keeps every handler error."""

    def __init__(self, *, message_content: bool = True) -> None:
        intents = discord.Intents.default()
        intents.members = True
        intents.message_content = message_content
        super().__init__(intents=intents, guild_ready_timeout=0.1)
        self.tree = app_commands.CommandTree(self)
        self.tree.error(self._on_tree_error)
        self.ready = asyncio.Event()
        self.resumed = asyncio.Event()
        self.messages: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.edits: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.errors: list[BaseException | None] = []

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """No pause: discord.py waits 5 s before every IDENTIFY but the first."""

    async def on_ready(self) -> None:
        self.ready.set()

    async def on_resumed(self) -> None:
        self.resumed.set()

    async def on_message(self, message: discord.Message) -> None:
        self.messages.put_nowait(message)

    async def on_message_edit(self, before: discord.Message, after: discord.Message) -> None:
        self.edits.put_nowait(after)

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        self.errors.append(sys.exc_info()[1])

    async def _on_tree_error(
        self, interaction: discord.Interaction, error: app_commands.AppCommandError
    ) -> None:
        self.errors.append(error)

    async def next_message(
        self, predicate: Callable[[discord.Message], bool] = lambda m: True
    ) -> discord.Message:
        async with asyncio.timeout(WAIT_S):
            while True:
                message = await self.messages.get()
                if predicate(message):
                    return message


@contextlib.asynccontextmanager
async def connected(fake: FakeDiscord, bot: Bot) -> AsyncIterator[Bot]:
    """Run ``bot`` against ``fake`` until on_ready; close it on exit and check for errors."""
    runner = asyncio.create_task(bot.start(fake.token))
    ready = asyncio.create_task(bot.ready.wait())
    try:
        done, _ = await asyncio.wait({runner, ready}, timeout=WAIT_S, return_when="FIRST_COMPLETED")
        if runner in done:
            runner.result()  # raises what ended the client
        assert ready in done, "on_ready did not fire"
        yield bot
        assert bot.errors == []
    finally:
        ready.cancel()
        await bot.close()
        await runner


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with running_fake_discord() as server:
        yield server


@pytest.fixture
def alice(fake: FakeDiscord) -> FakeUser:
    return fake.add_user("alice", global_name="Alice")


def text_channel(bot: Bot, fake: FakeDiscord) -> discord.TextChannel:
    channel = bot.get_channel(fake.channel_id)
    assert isinstance(channel, discord.TextChannel)
    return channel


async def test_login_ready_and_guild_create(fake: FakeDiscord, alice: FakeUser) -> None:
    thread_id = fake.add_thread(fake.channel_id, "ongoing")
    async with connected(fake, Bot()) as bot:
        assert bot.user is not None
        assert (bot.user.id, bot.user.bot) == (fake.bot_user.id, True)
        assert bot.application_id == fake.application_id
        guild = bot.get_guild(fake.guild_id)
        assert guild is not None
        assert guild.default_role.id == guild.id
        assert guild.member_count == len(guild.members) == 3
        assert guild.chunked
        assert guild.me is not None
        assert guild.get_member(alice.id) is not None
        assert isinstance(guild.get_channel(fake.channel_id), discord.TextChannel)
        assert isinstance(guild.get_thread(thread_id), discord.Thread)

    assert [r.path for r in fake.requests[:2]] == ["/users/@me", "/oauth2/applications/@me"]
    assert fake.identifies[0]["intents"] == bot.intents.value
    assert fake.connections[0].path == "/gateway"
    assert fake.connections[0].query["v"] == "10"
    assert fake.connections[0].query["encoding"] == "json"


async def test_rest_answers_carry_exact_json_content_type(fake: FakeDiscord) -> None:
    headers = {"Authorization": f"Bot {fake.token}"}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{fake.api_base}/users/@me", headers=headers) as response:
            assert response.headers["Content-Type"] == "application/json"
            assert (await response.json())["id"] == str(fake.bot_user.id)
        async with session.get(f"{fake.api_base}/users/@me") as response:
            assert response.status == 401


async def test_wrong_token_is_a_login_failure(fake: FakeDiscord) -> None:
    bot = Bot()
    with pytest.raises(discord.LoginFailure):
        await bot.start("not-the-token")
    await bot.close()


async def test_guild_message_with_mention_and_reply(fake: FakeDiscord, alice: FakeUser) -> None:
    async with connected(fake, Bot()) as bot:
        first = await fake.dispatch_message(
            fake.channel_id, alice, f"{fake.bot_user.mention} I like tea"
        )
        message = await bot.next_message()
        assert message.id == int(first["id"])
        assert message.content == f"<@{fake.bot_user.id}> I like tea"
        assert isinstance(message.author, discord.Member)
        assert message.author.id == alice.id
        assert bot.user in message.mentions
        assert isinstance(message.channel, discord.TextChannel)

        await fake.dispatch_message(fake.channel_id, alice, "and coffee", reply_to=message.id)
        reply = await bot.next_message()
        assert reply.type is discord.MessageType.reply
        assert reply.reference is not None
        assert reply.reference.message_id == message.id
        assert isinstance(reply.reference.resolved, discord.Message)
        assert reply.reference.resolved.content == message.content


async def test_dm_message_arrives_in_a_dm_channel(fake: FakeDiscord, alice: FakeUser) -> None:
    dm_id = fake.dm_channel_id(alice)
    async with connected(fake, Bot()) as bot:
        await fake.dispatch_message(dm_id, alice, "remember my birthday is in May")
        message = await bot.next_message()
        assert isinstance(message.channel, discord.DMChannel)
        assert message.channel.id == dm_id
        assert message.guild is None
        assert message.author.id == alice.id
        assert message.content == "remember my birthday is in May"

        await message.channel.send("noted")
        echo = await bot.next_message()
        assert echo.author.id == fake.bot_user.id
        assert (echo.channel.id, echo.content) == (dm_id, "noted")

        user = await bot.fetch_user(alice.id)
        dm = await user.create_dm()
        assert dm.id == dm_id
        assert fake.find_requests("POST", "/users/@me/channels")[0].json == {
            "recipient_id": alice.id
        }


async def test_send_echo_edit_and_rate_limit(fake: FakeDiscord, alice: FakeUser) -> None:
    async with connected(fake, Bot()) as bot:
        channel = text_channel(bot, fake)
        sent = await channel.send(
            f"hi {alice.mention} @everyone", allowed_mentions=discord.AllowedMentions.none()
        )
        request = fake.find_requests("POST", f"/channels/{fake.channel_id}/messages")[0]
        assert request.json["allowed_mentions"] == {"parse": []}
        echo = await bot.next_message()
        assert echo.author == bot.user
        assert echo.id == sent.id
        assert echo.mentions == []
        assert not echo.mention_everyone

        fake.rate_limit_next("PATCH", "/channels/*/messages/*", retry_after=0.05)
        edited = await sent.edit(content="edited")
        patches = fake.find_requests("PATCH", f"/channels/{fake.channel_id}/messages/{sent.id}")
        assert [p.status for p in patches] == [429, 200]
        assert edited.content == "edited"
        assert fake.message(sent.id)["content"] == "edited"
        assert (await bot.edits.get()).content == "edited"

        fake.fail_next("PATCH", "/channels/*/messages/*", status=404, code=10008, message="x")
        with pytest.raises(discord.NotFound) as not_found:
            await sent.edit(content="gone")
        assert not_found.value.code == 10008

        with pytest.raises(discord.HTTPException) as too_long:
            await channel.send("x" * 2001)
        assert too_long.value.code == 50035


async def test_files_history_typing_reactions_and_threads(
    fake: FakeDiscord, alice: FakeUser
) -> None:
    async with connected(fake, Bot()) as bot:
        channel = text_channel(bot, fake)
        async with channel.typing():
            sent = await channel.send("notes", file=discord.File(io.BytesIO(b"tea"), "notes.txt"))
        assert fake.typing_channel_ids == [fake.channel_id]
        upload = fake.find_requests("POST", f"/channels/{fake.channel_id}/messages")[0]
        assert upload.files[0].data == b"tea"
        assert upload.json["content"] == "notes"
        assert await sent.attachments[0].read() == b"tea"

        await fake.dispatch_message(fake.channel_id, alice, "newest")
        history = [m.content async for m in channel.history(limit=10)]
        assert history == ["newest", "notes"]
        assert (await channel.fetch_message(sent.id)).content == "notes"

        await sent.add_reaction("👍")
        assert fake.reactions == [("PUT", fake.channel_id, sent.id, "👍")]

        thread = await sent.create_thread(name="about tea")
        assert thread.id == sent.id
        await thread.send("in the thread")
        in_thread = await bot.next_message(lambda m: m.content == "in the thread")
        assert isinstance(in_thread.channel, discord.Thread)
        assert in_thread.channel.parent_id == fake.channel_id


async def test_slash_command_sync_and_ephemeral_answer(fake: FakeDiscord, alice: FakeUser) -> None:
    bot = Bot()

    @bot.tree.command(name="remember", description="Remember a fact")
    async def remember(interaction: discord.Interaction, fact: str, weight: int = 1) -> None:
        await interaction.response.send_message(f"noted: {fact} x{weight}", ephemeral=True)

    async with connected(fake, bot):
        synced = await bot.tree.sync()
        put = fake.find_requests("PUT", f"/applications/{fake.application_id}/commands")[0]
        assert [c["name"] for c in put.json] == ["remember"]
        assert synced[0].id == int(fake.global_commands[0]["id"])

        interaction = await fake.dispatch_slash_command(
            "remember", user=alice, options={"fact": "tea", "weight": 2}
        )
        response = await fake.wait_for_interaction_response(interaction)
        assert response.type == 4
        assert response.ephemeral
        assert response.content == "noted: tea x2"
        callback = fake.find_requests("POST", f"/interactions/{interaction.id}/*/callback")[0]
        assert callback.query == {"with_response": "1"}
        assert interaction.original_message_id is not None
        assert fake.messages_in(fake.channel_id) == []  # ephemeral: not in the channel


async def test_guild_subcommand_defer_then_followup(fake: FakeDiscord, alice: FakeUser) -> None:
    bot = Bot()
    memory = app_commands.Group(name="memory", description="Your memories")

    @memory.command(name="forget", description="Forget something")
    async def forget(interaction: discord.Interaction, what: str) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await interaction.followup.send(f"forgot {what}", ephemeral=True)

    bot.tree.add_command(memory, guild=discord.Object(fake.guild_id))
    async with connected(fake, bot):
        await bot.tree.sync(guild=discord.Object(fake.guild_id))
        assert [c["name"] for c in fake.guild_commands[fake.guild_id]] == ["memory"]

        interaction = await fake.dispatch_slash_command(
            "memory forget", user=alice, options={"what": "tea"}
        )
        assert interaction.payload["data"]["guild_id"] == str(fake.guild_id)
        response = await fake.wait_for_interaction_response(interaction)
        assert (response.type, response.ephemeral) == (5, True)
        await fake.wait_for_request("POST", f"/webhooks/{fake.application_id}/*")
        assert interaction.original_message_id is not None
        original = fake.message(interaction.original_message_id)
        assert original["content"] == "forgot tea"
        assert original["flags"] & FLAG_EPHEMERAL
        assert not original["flags"] & FLAG_LOADING


async def test_autocomplete_is_answered_with_choices(fake: FakeDiscord, alice: FakeUser) -> None:
    bot = Bot()

    @bot.tree.command(name="recall", description="Recall a memory")
    async def recall(interaction: discord.Interaction, topic: str) -> None:
        await interaction.response.send_message(topic)

    @recall.autocomplete("topic")
    async def topics(
        interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        names = ("tea", "coffee", "tennis")
        return [app_commands.Choice(name=n, value=n) for n in names if n.startswith(current)]

    async with connected(fake, bot):
        await bot.tree.sync()
        interaction = await fake.dispatch_autocomplete(
            "recall", user=alice, focused="topic", options={"topic": "te"}
        )
        response = await fake.wait_for_interaction_response(interaction)
        assert response.type == 8
        assert [c["value"] for c in response.choices] == ["tea", "tennis"]


class Confirm(discord.ui.View):
    def __init__(self) -> None:
        super().__init__(timeout=None)
        self.clicked_by: int | None = None

    @discord.ui.button(label="Forget", custom_id="forget:yes", style=discord.ButtonStyle.danger)
    async def yes(self, interaction: discord.Interaction, button: discord.ui.Button[Any]) -> None:
        self.clicked_by = interaction.user.id
        await interaction.response.edit_message(content="forgotten", view=None)


async def test_button_click_updates_the_message(fake: FakeDiscord, alice: FakeUser) -> None:
    async with connected(fake, Bot()) as bot:
        view = Confirm()
        sent = await text_channel(bot, fake).send("Forget tea?", view=view)
        assert fake.message(sent.id)["components"][0]["components"][0]["custom_id"] == "forget:yes"

        interaction = await fake.dispatch_component(sent.id, "forget:yes", user=alice)
        response = await fake.wait_for_interaction_response(interaction)
        assert response.type == 7
        assert view.clicked_by == alice.id
        assert fake.message(sent.id)["content"] == "forgotten"
        assert fake.message(sent.id)["components"] == []
        assert (await bot.edits.get()).content == "forgotten"


async def test_disconnect_resumes_and_replays_missed_dispatches(
    fake: FakeDiscord, alice: FakeUser
) -> None:
    async with connected(fake, Bot()) as bot:
        await fake.disconnect(code=4000)
        await fake.dispatch_message(fake.channel_id, alice, "while you were away")
        await fake.wait_for_resume()
        assert (await bot.next_message()).content == "while you were away"
        await asyncio.wait_for(bot.resumed.wait(), WAIT_S)
        assert fake.connections[-1].path == "/resume"
        assert fake.resumes[0]["session_id"] == bot.ws.session_id

        await fake.dispatch_message(fake.channel_id, alice, "after the resume")
        assert (await bot.next_message()).content == "after the resume"

        await fake.invalidate_session()
        await fake.wait_for_session(count=2)
        await fake.dispatch_message(fake.channel_id, alice, "new session")
        assert (await bot.next_message()).content == "new session"
        assert fake.identifies[1]["token"] == fake.token


async def test_without_message_content_intent_guild_text_is_empty(
    fake: FakeDiscord, alice: FakeUser
) -> None:
    async with connected(fake, Bot(message_content=False)) as bot:
        await fake.dispatch_message(fake.channel_id, alice, "secret")
        assert (await bot.next_message()).content == ""
        await fake.dispatch_message(fake.channel_id, alice, f"{fake.bot_user.mention} hi")
        assert (await bot.next_message()).content.endswith("hi")
        await fake.dispatch_message(fake.dm_channel_id(alice), alice, "dm text")
        assert (await bot.next_message()).content == "dm text"


async def test_ungranted_message_content_closes_with_4014() -> None:
    async with running_fake_discord(grant_message_content=False) as fake:
        bot = Bot()
        with pytest.raises(discord.PrivilegedIntentsRequired):
            await asyncio.wait_for(bot.start(fake.token), WAIT_S)
        await bot.close()
        assert fake.identifies == []
