"""``/memories channel ...`` on Discord: a channel's own memory (team memory), the grammar
and replies of :mod:`core.memory.team_commands`; this module only maps the subcommands to
its verbs and posts the reply.

Subcommands of the ``/memories`` group: ``channel list [page]``, ``channel add text:``,
``channel correct entry: text:``, ``channel forget entry:``, ``channel undo token:``,
``channel on``, ``channel off``. A change is announced in the channel or thread where it was
made (a visible response, mentions pinging nobody); a listing and every refusal go to the
caller only. Turning it on or off needs the Manage Channels permission there (the
interaction's resolved ``permissions``) as well as the operator's lists
(``SELFMIND_CHANNEL_MEMORY_ADMINS``, ``selfmind channels memory on KEY --allow``).
"""

from __future__ import annotations

import logging
from typing import Any

import discord
from discord import app_commands

from bots.discord_bot.commands import reply, user_key_of
from bots.discord_bot.places import interaction_place
from bots.discord_bot.sink import NO_MENTIONS
from core.memory.team import TeamMemory
from core.memory.team_commands import TeamReply, channel_command
from core.types import MAX_MEMORY_CHARS

logger = logging.getLogger(__name__)

Interaction = discord.Interaction[Any]


async def post(interaction: Interaction, answer: TeamReply) -> None:
    """A public answer where the command was used (everyone there sees it, nobody is
    pinged), else an ephemeral one."""
    if not answer.public:
        await reply(interaction, answer.text)
        return
    if interaction.response.is_done():
        await interaction.followup.send(answer.text, allowed_mentions=NO_MENTIONS)
    else:
        await interaction.response.send_message(answer.text, allowed_mentions=NO_MENTIONS)


def can_manage(interaction: Interaction) -> bool:
    """Manage Channels where the command was used (Discord resolves it per channel)."""
    return bool(interaction.permissions.manage_channels)


def add_channel_commands(tree: app_commands.CommandTree[Any], *, team: TeamMemory) -> None:
    """Add the ``channel`` subgroup to ``/memories`` (:func:`add_memory_commands` first)."""
    memories = tree.get_command("memories")
    assert isinstance(memories, app_commands.Group)
    channel = app_commands.Group(
        name="channel", description="This channel's own memory (team memory).", parent=memories
    )

    async def run(interaction: Interaction, text: str) -> None:
        answer = await channel_command(
            team,
            place=interaction_place(interaction),
            user_key=user_key_of(interaction.user),
            user_name=interaction.user.display_name,
            text=text,
            can_manage=can_manage(interaction),
        )
        await post(interaction, answer)

    @channel.command(name="list", description="This channel's memory, newest first.")
    async def channel_list(
        interaction: Interaction, page: app_commands.Range[int, 1, 9999] = 1
    ) -> None:
        await run(interaction, f"list {page}")

    @channel.command(name="add", description="Add something the team settled.")
    async def channel_add(
        interaction: Interaction, text: app_commands.Range[str, 1, MAX_MEMORY_CHARS - 1]
    ) -> None:
        await run(interaction, f"add {text}")

    @channel.command(name="correct", description="Replace one entry's text.")
    async def channel_correct(
        interaction: Interaction,
        entry: app_commands.Range[int, 1],
        text: app_commands.Range[str, 1, MAX_MEMORY_CHARS - 1],
    ) -> None:
        await run(interaction, f"correct {entry} {text}")

    @channel.command(name="forget", description="Take one entry out (undoable for 7 days).")
    async def channel_forget(interaction: Interaction, entry: app_commands.Range[int, 1]) -> None:
        await run(interaction, f"forget {entry}")

    @channel.command(name="undo", description="Undo a change to this channel's memory.")
    async def channel_undo(interaction: Interaction, token: app_commands.Range[str, 1, 64]) -> None:
        await run(interaction, f"undo {token}")

    @channel.command(name="on", description="Turn this channel's memory on (Manage Channels).")
    async def channel_on(interaction: Interaction) -> None:
        await run(interaction, "on")

    @channel.command(name="off", description="Turn this channel's memory off (Manage Channels).")
    async def channel_off(interaction: Interaction) -> None:
        await run(interaction, "off")
