"""Discord conversations: which messages the bot answers, which conversation each belongs
to, and the context stored the first time the bot sees a conversation.

Who gets an answer: a message that mentions the bot (or the role Discord manages for it) in
a server channel, a reply to one of the bot's messages, any message in a thread the bot is
answering in, and every DM. Other bots and the bot itself never do.

Conversation keys (``conversation_key``):

- a DM: ``discord:dm:{channel_id}``, origin ``private``;
- a thread: ``discord:{guild_id}:{thread_id}``, origin ``shared``;
- a server channel: one conversation per reply chain, keyed by the chain's first message,
  ``discord:{guild_id}:{channel_id}:{root_message_id}``, origin ``shared``, so separate
  conversations in one channel never mix.

The channel (or thread) id is always the key's third part (:func:`channel_of`), so a
reaction can find a message from a stored turn alone.

The first time the bot answers in a conversation, the reply chain (or the thread's recent
history, with the message the thread was started from) is stored as context: each message
under its own author's key, the bot's own as the assistant's, never reflected on, at most
``2 * history_turns`` messages (what the turn loop reads back).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass, field

import discord

from bots.discord_bot.commands import user_key_of
from bots.discord_bot.places import discord_place
from core.chat.intake import Intake
from core.chat.loop import ContextMessage, TurnLoop
from core.types import Origin, Place

logger = logging.getLogger(__name__)

MAX_CHAIN_HOPS = 100
"""Reply-chain messages walked to find a conversation's first message."""
KNOWN_MESSAGES = 50_000
"""Message ids remembered (in memory) as belonging to a conversation; the oldest drop out."""
ANSWERED_TYPES = (discord.MessageType.default, discord.MessageType.reply)

_MENTION = re.compile(r"<@!?(\d+)>|<@&(\d+)>|<#(\d+)>")


def dm_key(channel_id: int) -> str:
    return f"discord:dm:{channel_id}"


def thread_key(guild_id: int, thread_id: int) -> str:
    return f"discord:{guild_id}:{thread_id}"


def chain_key(guild_id: int, channel_id: int, root_id: int) -> str:
    return f"discord:{guild_id}:{channel_id}:{root_id}"


def channel_of(conversation_key: str) -> int | None:
    """The channel (or thread) id inside a Discord conversation key; None for other keys."""
    parts = conversation_key.split(":")
    if parts[0] != "discord" or len(parts) not in (3, 4) or not parts[2].isdigit():
        return None
    return int(parts[2])


def where_of(conversation_key: str) -> str:
    """The prompt's one line for a Discord conversation key (as :class:`Route` ``where``)."""
    parts = conversation_key.split(":")
    if parts[1] == "dm":
        return "a Discord DM"
    return "a Discord server thread" if len(parts) == 3 else "a Discord server channel"


def is_bot_role(role: discord.Role, bot_id: int) -> bool:
    """The role Discord manages for the bot (users often mention it instead of the bot)."""
    return role.tags is not None and role.tags.bot_id == bot_id


def message_text(message: discord.Message, *, bot_id: int) -> str:
    """The message as the model reads it: mentions of the bot removed, other user mentions
    kept as ``<@id>`` (how the prompt labels each person's lines,
    :func:`core.rules.links.speaker`: a server nickname is no identity), role and channel
    mentions as ``@name`` / ``#name``. Attachments are files the core reads
    (:mod:`bots.discord_bot.files`), named by their placeholders."""
    roles = {r.id: r for r in message.role_mentions}
    channels = {c.id: c.name for c in message.channel_mentions}

    def named(match: re.Match[str]) -> str:
        user, role, channel = match.groups()
        if user is not None:
            return "" if int(user) == bot_id else f"<@{int(user)}>"
        if role is not None:
            found = roles.get(int(role))
            if found is not None and is_bot_role(found, bot_id):
                return ""
            return f"@{found.name if found else 'role'}"
        return f"#{channels.get(int(channel), 'channel')}"

    return _MENTION.sub(named, message.content).strip()


@dataclass
class Route:
    """Where an answered message belongs: its conversation and how to seed it."""

    key: str
    origin: Origin
    where: str
    ancestors: list[discord.Message] = field(default_factory=list)  # reply chain, nearest first
    thread: discord.Thread | None = None
    place: Place | None = None
    """Where it was said (:func:`bots.discord_bot.places.discord_place`)."""


class Conversations:
    """Routes messages to conversations and seeds each conversation's context once.

    Remembers (in memory, bounded) which conversation each answered message and each answer
    message belongs to, so a reply resolves in one step; after a restart the reply chain is
    walked back to its first message instead (cache first, then REST).
    """

    def __init__(self, *, intake: Intake, turns: TurnLoop, history_turns: int) -> None:
        self.intake = intake
        self.turns = turns
        self.history_turns = history_turns
        self._known: OrderedDict[int, str] = OrderedDict()  # message id -> conversation key
        self._answering: set[str] = set()  # conversations answered in
        self._seeded: set[str] = set()  # conversations whose context is stored

    def remember(self, message_id: int, key: str) -> None:
        """Record that ``message_id`` (the user's or an answer's) belongs to ``key``."""
        self._known[message_id] = key
        self._known.move_to_end(message_id)
        while len(self._known) > KNOWN_MESSAGES:
            self._known.popitem(last=False)
        self._answering.add(key)

    async def route(self, message: discord.Message, *, me: discord.abc.User) -> Route | None:
        """The conversation ``message`` belongs to if the bot should answer it, else None."""
        if message.author.bot or message.author.id == me.id:
            return None
        if message.type not in ANSWERED_TYPES:
            return None
        channel = message.channel
        if isinstance(channel, discord.DMChannel):
            return Route(
                dm_key(channel.id), "private", "a Discord DM", place=discord_place(channel, None)
            )
        guild = message.guild
        if guild is None:
            return None  # group DMs are not for bots
        mentioned = any(u.id == me.id for u in message.mentions) or any(
            is_bot_role(r, me.id) for r in message.role_mentions
        )
        if isinstance(channel, discord.Thread):
            key = thread_key(guild.id, channel.id)
            if mentioned or await self._replies_to(message, me.id) or await self._answering_in(key):
                return Route(
                    key,
                    "shared",
                    "a Discord server thread",
                    thread=channel,
                    place=discord_place(channel, guild),
                )
            return None
        if not (mentioned or await self._replies_to(message, me.id)):
            return None
        key, ancestors = await self._reply_chain(message, guild.id)
        return Route(
            key,
            "shared",
            "a Discord server channel",
            ancestors=ancestors,
            place=discord_place(channel, guild),
        )

    async def seed_once(
        self, message: discord.Message, route: Route, *, me: discord.abc.User
    ) -> None:
        """Store the reply chain or thread history the first time a conversation is seen
        (marked in the store, so never twice, also across restarts)."""
        if route.key in self._seeded:
            return
        self._seeded.add(route.key)
        if not await self.intake.once(f"discord:seeded:{route.key}"):
            return
        limit = 2 * self.history_turns
        if limit == 0:
            return
        if route.thread is not None:
            earlier = await self._thread_history(route.thread, before=message, limit=limit)
        else:
            earlier = list(reversed(route.ancestors[:limit]))
        context = [c for c in (context_message(m, me=me) for m in earlier) if c.text]
        if context:
            await self.turns.seed_context(
                conversation_key=route.key, origin=route.origin, messages=context
            )
            logger.info("seeded conversation=%s with %d messages", route.key, len(context))

    async def _answering_in(self, key: str) -> bool:
        """True when the bot has answered in this conversation (now or before a restart)."""
        if key in self._answering:
            return True
        if await self.intake.has_history(key):
            self._answering.add(key)
            return True
        return False

    async def _replies_to(self, message: discord.Message, user_id: int) -> bool:
        if message.reference is None:
            return False
        parent = await referenced(message)
        return parent is not None and parent.author.id == user_id

    async def _reply_chain(
        self, message: discord.Message, guild_id: int
    ) -> tuple[str, list[discord.Message]]:
        """The chain's conversation key and the messages walked to find it (nearest first).

        Stops early at a message known to belong to a conversation; a deleted message ends
        the chain and its id is the root.
        """
        channel_id = message.channel.id
        ancestors: list[discord.Message] = []
        current = message
        for _ in range(MAX_CHAIN_HOPS):
            ref = current.reference
            if ref is None or ref.message_id is None or ref.channel_id != channel_id:
                break
            known = self._known.get(ref.message_id)
            if known is not None:
                return known, ancestors
            parent = await referenced(current)
            if parent is None:
                return chain_key(guild_id, channel_id, ref.message_id), ancestors
            ancestors.append(parent)
            current = parent
        return chain_key(guild_id, channel_id, current.id), ancestors

    async def _thread_history(
        self, thread: discord.Thread, *, before: discord.Message, limit: int
    ) -> list[discord.Message]:
        """The thread's last ``limit`` messages before ``before`` (with the message it was
        started from, when there is one), oldest first."""
        recent = [m async for m in thread.history(limit=limit, before=before)]
        recent = [m for m in recent if m.type in ANSWERED_TYPES]
        if len(recent) < limit and isinstance(thread.parent, discord.TextChannel):
            # A thread started from a message has that message's id; others give 404.
            with contextlib.suppress(discord.NotFound, discord.Forbidden):
                recent.append(await thread.parent.fetch_message(thread.id))
        return list(reversed(recent))


async def referenced(message: discord.Message) -> discord.Message | None:
    """The message ``message`` replies to, in the same channel (payload, cache, then REST);
    None when there is none or it was deleted."""
    ref = message.reference
    if ref is None or ref.message_id is None or ref.channel_id != message.channel.id:
        return None
    if isinstance(ref.resolved, discord.Message):
        return ref.resolved
    if isinstance(ref.resolved, discord.DeletedReferencedMessage):
        return None
    if ref.cached_message is not None:
        return ref.cached_message
    try:
        return await message.channel.fetch_message(ref.message_id)
    except (discord.NotFound, discord.Forbidden):
        return None


def context_message(message: discord.Message, *, me: discord.abc.User) -> ContextMessage:
    """An earlier platform message as stored context, under its author's own key; a bot's
    or a webhook's under none (the prompt marks it as a bot's, its name as data: a webhook
    picks any name and avatar per message)."""
    mine = message.author.id == me.id
    machine = not mine and (message.author.bot or message.webhook_id is not None)
    return ContextMessage(
        text=message_text(message, bot_id=me.id),
        role="assistant" if mine else "user",
        author=None if mine else message.author.display_name,
        user_key=None if mine or machine else user_key_of(message.author),
        sent_at=message.created_at,
    )
