"""Where a Discord message or command was said (:class:`core.types.Place`).

- a DM with the bot: the person's DM (``workspace`` None: Discord DMs belong to no server;
  bots cannot be in group DMs);
- a server channel: the guild is the workspace; the channel is **private** when its
  permission overwrite for ``@everyone`` (the role whose id is the guild's) denies View
  Channel, or when it sets nothing and ``@everyone`` lacks View Channel server-wide; else
  **public**. Roles or members allowed back in do not make it public: what counts is
  whether anyone who joins the server can read it;
- a thread belongs to its channel, a forum post to its forum (same rule on the parent);
  a private thread is a private place of its own (the thread's id), whatever its parent:
  only the people invited to it read it, fewer than its channel's members, even in a
  private channel;
- a channel the bot cannot see the permissions of (not cached): a private channel, the
  narrowest.
"""

from __future__ import annotations

from typing import Any

import discord

from core.types import Place, PlaceKind


def everyone_denied(channel: Any) -> bool:
    """The module's rule: True when ``@everyone`` cannot view ``channel`` (a guild channel
    with ``overwrites_for`` and ``guild``); False when it can."""
    guild = channel.guild
    everyone = guild.default_role
    overwrite = channel.overwrites_for(everyone)
    if overwrite.view_channel is not None:
        return not overwrite.view_channel
    return not everyone.permissions.view_channel


def discord_place(channel: Any, guild: discord.Guild | None) -> Place:
    """Where something said in ``channel`` (of ``guild``, None for a DM) was said."""
    if guild is None:
        return Place(platform="discord", kind="dm", channel=str(getattr(channel, "id", "")) or None)
    workspace = str(guild.id)
    if isinstance(channel, discord.Thread):
        if channel.type is discord.ChannelType.private_thread:
            return Place("discord", "private_channel", workspace, str(channel.id))
        parent = channel.parent
        if parent is None:
            return Place("discord", "private_channel", workspace, str(channel.parent_id))
        kind: PlaceKind = "private_channel" if everyone_denied(parent) else "public_channel"
        return Place("discord", kind, workspace, str(parent.id))
    if not hasattr(channel, "overwrites_for"):
        return Place("discord", "private_channel", workspace, str(getattr(channel, "id", "")))
    own: PlaceKind = "private_channel" if everyone_denied(channel) else "public_channel"
    return Place("discord", own, workspace, str(channel.id))


def interaction_place(interaction: discord.Interaction[Any]) -> Place:
    """Where a slash command was used; a server the bot does not have cached (a command
    from a guild it is not in) is a private channel of that guild, never a DM."""
    if interaction.guild_id is not None and interaction.guild is None:
        channel = str(interaction.channel_id) if interaction.channel_id is not None else None
        return Place("discord", "private_channel", str(interaction.guild_id), channel)
    return discord_place(interaction.channel, interaction.guild)
