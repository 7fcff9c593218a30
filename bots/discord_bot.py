"""The Discord adapter (``selfmind discord``): a thin discord.py 2.x client over the core.

Who gets an answer: a message that mentions the bot in a server channel, a reply to one of
the bot's messages, any message in a thread the bot is answering in, and every DM. Other
bots and the bot itself never do. Each answered message is claimed once in the store
(``discord:msg:{id}``), so a gateway replay after RESUME never answers twice.

Conversations (``conversation_key``) and memory (``user_key = discord:{user_id}``):

- a DM: ``discord:dm:{channel_id}``, origin ``private``;
- a thread: ``discord:{guild_id}:{thread_id}``, origin ``shared``;
- a server channel: one conversation per reply chain, keyed by the chain's first message:
  ``discord:{guild_id}:{channel_id}:{root_message_id}``, origin ``shared``.

The first time the bot answers in a conversation, the reply chain (or the thread's recent
history) is stored as context, each message under its own author's key and never reflected
on, at most ``2 * history_turns`` messages (what the turn loop reads back). The answer
streams by message edits through :mod:`core.streaming` (2,000-character roll-over, typing
indicator); nothing it says pings anyone. When a reflection stores a memory, a 🧠 reaction
appears on the user's message (``SELFMIND_DISCORD_MEMORY_REACTIONS``); the channel is read
back from the conversation key, so this works for reflections resumed after a restart too.
A user's first DM gets a one-line notice that the bot remembers and how to manage it.

``DISCORD_API_BASE_URL`` / ``DISCORD_GATEWAY_URL`` point discord.py at a Discord-compatible
server (self-hosted Spacebar, the test fake) by setting ``discord.http.Route.BASE`` and
``DiscordWebSocket.DEFAULT_GATEWAY`` for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl
from discord import app_commands

from bots.discord_commands import add_memory_commands, on_tree_error, user_key_of
from bots.discord_sink import NO_MENTIONS, DiscordSink
from core.errors import ConfigError, SelfMindError
from core.loop import ContextMessage, IncomingMessage, TurnLoop
from core.models import Origin
from core.reflection import ReflectionResult, Reflector
from core.runtime import Runtime, open_runtime
from core.settings import Settings
from core.streaming import StreamConfig, stream_reply

logger = logging.getLogger(__name__)

MEMORY_REACTION = "🧠"
FIRST_DM_NOTICE = (
    "I remember useful things you tell me so I can help you better later; "
    "see them with `/memories list`, delete them with `/forget`, and pause or stop it "
    "with `/memory pause` or `/memory off`."
)
EMPTY_MENTION_REPLY = "Hi! Mention me with a question, or reply to one of my messages."
GENERIC_ERROR = "Something went wrong while answering; please try again."
INTENT_HELP = (
    "Discord refused the MESSAGE CONTENT intent: enable it in the Developer Portal "
    "(your application > Bot > Privileged Gateway Intents > MESSAGE CONTENT INTENT)"
)
MAX_CHAIN_HOPS = 100
"""Reply-chain messages walked to find a conversation's first message."""
KNOWN_MESSAGES = 50_000
"""Message ids remembered in memory as belonging to a conversation (oldest dropped)."""
MAX_RATELIMIT_WAIT_S = 30.0
"""A 429 asking for a longer wait reaches the streamer as ``RateLimited`` (discord.py's
smallest allowed ``max_ratelimit_timeout``)."""
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


def is_bot_role(role: discord.Role, bot_id: int) -> bool:
    """The role Discord manages for the bot (users often mention it instead of the bot)."""
    return role.tags is not None and role.tags.bot_id == bot_id


def message_text(message: discord.Message, *, bot_id: int) -> str:
    """The message as the model reads it: mentions of the bot removed, other user, role and
    channel mentions as ``@name`` / ``#name``, attachments named on their own lines."""
    users = {u.id: u.display_name for u in message.mentions}
    roles = {r.id: r for r in message.role_mentions}
    channels = {c.id: c.name for c in message.channel_mentions}

    def named(match: re.Match[str]) -> str:
        user, role, channel = match.groups()
        if user is not None:
            return "" if int(user) == bot_id else f"@{users.get(int(user), 'someone')}"
        if role is not None:
            found = roles.get(int(role))
            if found is not None and is_bot_role(found, bot_id):
                return ""
            return f"@{found.name if found else 'role'}"
        return f"#{channels.get(int(channel), 'channel')}"

    text = _MENTION.sub(named, message.content).strip()
    names = [f"[attachment: {a.filename}]" for a in message.attachments]
    return "\n".join([text, *names] if text else names)


@dataclass
class Route:
    """Where an answered message belongs: its conversation and how to seed it."""

    key: str
    origin: Origin
    where: str
    ancestors: list[discord.Message] = field(default_factory=list)  # reply chain, nearest first
    thread: discord.Thread | None = None


class KeyedLocks:
    """One lock per conversation, so answers in one conversation run in message order."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class SelfMindBot(discord.Client):
    """The Discord client with the runtime injected (see :func:`run_discord`).

    ``guild_ready_timeout``: seconds discord.py waits for more GUILD_CREATEs before
    ``on_ready`` (tests lower it).
    """

    def __init__(self, rt: Runtime, *, guild_ready_timeout: float = 2.0) -> None:
        if rt.loop is None or rt.reflector is None:
            raise ConfigError("ANTHROPIC_API_KEY is not set")
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.dm_messages = True
        intents.message_content = True
        super().__init__(
            intents=intents,
            allowed_mentions=NO_MENTIONS,
            guild_ready_timeout=guild_ready_timeout,
            max_ratelimit_timeout=MAX_RATELIMIT_WAIT_S,
        )
        self.rt = rt
        self.settings: Settings = rt.settings
        self.turns: TurnLoop = rt.loop
        self.reflector: Reflector = rt.reflector
        self.stream_config = StreamConfig.for_discord(
            max_chars=self.settings.discord_max_reply_chars,
            edit_interval_s=self.settings.discord_edit_interval_s,
        )
        self.tree: app_commands.CommandTree[discord.Client] = app_commands.CommandTree(self)
        self.tree.error(on_tree_error)
        add_memory_commands(self.tree, service=rt.service, store=rt.store)
        self._known: OrderedDict[int, str] = OrderedDict()  # message id -> conversation key
        self._answering: set[str] = set()  # conversations answered in (this process)
        self._seeded: set[str] = set()  # conversations whose context is stored
        self._locks = KeyedLocks()
        self._inflight: set[asyncio.Task[object]] = set()
        self._closing = False

    # --- lifecycle

    async def setup_hook(self) -> None:
        """Resume pending reflections, then sync the slash commands."""
        self.reflector.on_learned = self.on_learned
        await self.turns.start()
        guild_id = self.settings.discord_guild_id
        try:
            if guild_id is not None:
                guild = discord.Object(id=guild_id)
                self.tree.copy_global_to(guild=guild)
                synced = await self.tree.sync(guild=guild)
            else:
                synced = await self.tree.sync()
        except discord.Forbidden:
            where = f"server {guild_id}" if guild_id is not None else "this application"
            raise ConfigError(
                f"DISCORD_GUILD_ID: cannot register slash commands in {where}; invite the bot "
                "there with the bot and applications.commands scopes"
            ) from None
        scope = f"server {guild_id}" if guild_id is not None else "all servers (global)"
        logger.info("synced %d slash commands to %s", len(synced), scope)

    async def on_ready(self) -> None:
        assert self.user is not None
        logger.info(
            "connected as %s (id %s), %d servers", self.user, self.user.id, len(self.guilds)
        )

    async def close(self) -> None:
        """Stop taking messages, let answers in flight and reflections finish (each bounded by
        ``shutdown_timeout_s``, so their reactions still land), then disconnect."""
        if not self._closing:
            self._closing = True
            timeout = self.settings.shutdown_timeout_s
            if not await self.wait_idle(timeout):
                logger.warning("shutdown: answers still in flight after %s s", timeout)
            await self.reflector.drain(timeout)
        await super().close()

    async def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no message is being handled; False if ``timeout_s`` passed first."""
        pending = {t for t in self._inflight if not t.done()}
        if not pending:
            return True
        _, not_done = await asyncio.wait(pending, timeout=timeout_s)
        return not not_done

    # --- messages

    async def on_message(self, message: discord.Message) -> None:
        """The message edge: route, claim once, answer; errors end here as one short line."""
        if self._closing:
            return
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            route = await self.route(message)
            if route is None:
                return
            if not await self.rt.store.claim_event(keys=[f"discord:msg:{message.id}"]):
                logger.info("message %s already claimed (gateway replay); skipped", message.id)
                return
            await self.answer(message, route)
        except SelfMindError as exc:
            logger.warning("message %s failed: %s", message.id, type(exc).__name__)
            await self._tell(message, str(exc))
        except Exception:
            logger.exception("message %s failed", message.id)
            await self._tell(message, GENERIC_ERROR)
        finally:
            if task is not None:
                self._inflight.discard(task)

    async def route(self, message: discord.Message) -> Route | None:
        """The conversation ``message`` belongs to if the bot should answer it, else None."""
        me = self.user
        if me is None or message.author.bot or message.author.id == me.id:
            return None
        if message.type not in ANSWERED_TYPES:
            return None
        channel = message.channel
        if isinstance(channel, discord.DMChannel):
            return Route(dm_key(channel.id), "private", "a Discord DM")
        guild = message.guild
        if guild is None:
            return None  # group DMs are not for bots
        mentioned = any(u.id == me.id for u in message.mentions) or any(
            is_bot_role(r, me.id) for r in message.role_mentions
        )
        if isinstance(channel, discord.Thread):
            key = thread_key(guild.id, channel.id)
            if mentioned or await self._replies_to_me(message) or await self._answering_in(key):
                return Route(key, "shared", "a Discord server thread", thread=channel)
            return None
        if not (mentioned or await self._replies_to_me(message)):
            return None
        key, ancestors = await self._reply_chain(message, guild.id)
        return Route(key, "shared", "a Discord server channel", ancestors=ancestors)

    async def answer(self, message: discord.Message, route: Route) -> None:
        """Seed the conversation once, then stream the answer into the channel."""
        me = self.user
        assert me is not None
        self._remember(message.id, route.key)
        text = message_text(message, bot_id=me.id)
        if not text:
            await message.reply(EMPTY_MENTION_REPLY, allowed_mentions=NO_MENTIONS)
            return
        incoming = IncomingMessage(
            user_key=user_key_of(message.author),
            conversation_key=route.key,
            text=text,
            origin=route.origin,
            sent_at=message.created_at,
            author=message.author.display_name,
            platform_ref=str(message.id),
            where=route.where,
        )
        async with self._locks.hold(route.key):
            await self._seed_once(message, route)
            if route.origin == "private" and await self.rt.store.mark_once(
                mark=f"discord:first-dm:{message.author.id}"
            ):
                await message.channel.send(FIRST_DM_NOTICE, allowed_mentions=NO_MENTIONS)
            sink = DiscordSink(
                message.channel,
                reply_to=message,
                on_post=lambda message_id: self._remember(message_id, route.key),
            )
            try:
                result = await stream_reply(sink, self.turns.answer(incoming), self.stream_config)
            finally:
                await sink.close()
        logger.info(
            "answered message=%s conversation=%s messages=%d chars=%d error=%s",
            message.id,
            route.key,
            len(result.messages),
            len(result.text),
            type(result.error).__name__ if result.error else None,
        )

    # --- conversations and context

    def _remember(self, message_id: int, key: str) -> None:
        self._known[message_id] = key
        self._known.move_to_end(message_id)
        while len(self._known) > KNOWN_MESSAGES:
            self._known.popitem(last=False)
        self._answering.add(key)

    async def _answering_in(self, key: str) -> bool:
        """True when the bot has answered in this conversation (now or before a restart)."""
        if key in self._answering:
            return True
        if await self.rt.store.recent_turns(conversation_key=key, limit=1):
            self._answering.add(key)
            return True
        return False

    async def _referenced(self, message: discord.Message) -> discord.Message | None:
        """The message ``message`` replies to, in the same channel (cache, then REST)."""
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

    async def _replies_to_me(self, message: discord.Message) -> bool:
        if message.reference is None or self.user is None:
            return False
        parent = await self._referenced(message)
        return parent is not None and parent.author.id == self.user.id

    async def _reply_chain(
        self, message: discord.Message, guild_id: int
    ) -> tuple[str, list[discord.Message]]:
        """The chain's conversation key and the messages walked to find it (nearest first).

        Stops early at a message known to belong to a conversation (answered in this
        process); a deleted message ends the chain and its id is the root.
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
            parent = await self._referenced(current)
            if parent is None:
                return chain_key(guild_id, channel_id, ref.message_id), ancestors
            ancestors.append(parent)
            current = parent
        return chain_key(guild_id, channel_id, current.id), ancestors

    async def _seed_once(self, message: discord.Message, route: Route) -> None:
        """Store the reply chain or thread history the first time a conversation is seen."""
        if route.key in self._seeded:
            return
        self._seeded.add(route.key)
        if not await self.rt.store.mark_once(mark=f"discord:seeded:{route.key}"):
            return
        limit = 2 * self.settings.history_turns
        if limit == 0:
            return
        if route.thread is not None:
            earlier = await self._thread_history(route.thread, before=message, limit=limit)
        else:
            earlier = list(reversed(route.ancestors[:limit]))
        context = [self._context_message(m) for m in earlier]
        context = [c for c in context if c.text]
        if context:
            await self.turns.seed_context(
                conversation_key=route.key, origin=route.origin, messages=context
            )
            logger.info("seeded conversation=%s with %d messages", route.key, len(context))

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

    def _context_message(self, message: discord.Message) -> ContextMessage:
        me = self.user
        assert me is not None
        mine = message.author.id == me.id
        return ContextMessage(
            text=message_text(message, bot_id=me.id),
            role="assistant" if mine else "user",
            author=None if mine else message.author.display_name,
            user_key=None if mine else user_key_of(message.author),
            sent_at=message.created_at,
        )

    # --- memory reactions and errors

    async def on_learned(self, result: ReflectionResult) -> None:
        """Reflection callback: react with 🧠 on the message something was learned from."""
        turn = result.turn
        if not self.settings.discord_memory_reactions or turn.platform_ref is None:
            return
        channel_id = channel_of(turn.conversation_key)
        if channel_id is None or not turn.platform_ref.isdigit() or self.is_closed():
            return
        channel = self.get_partial_messageable(channel_id)
        try:
            await channel.get_partial_message(int(turn.platform_ref)).add_reaction(MEMORY_REACTION)
        except discord.HTTPException as exc:
            logger.info(
                "memory reaction on message %s skipped: HTTP %s", turn.platform_ref, exc.status
            )

    async def _tell(self, message: discord.Message, text: str) -> None:
        try:
            await message.channel.send(text, allowed_mentions=NO_MENTIONS)
        except (discord.HTTPException, aiohttp.ClientError) as exc:
            logger.info("could not report an error in channel %s: %s", message.channel.id, exc)


@contextlib.contextmanager
def discord_endpoints(settings: Settings) -> Iterator[None]:
    """Point discord.py at ``DISCORD_API_BASE_URL`` (REST base with the version, e.g.
    ``http://localhost:3001/api/v10``) and ``DISCORD_GATEWAY_URL`` (e.g.
    ``ws://localhost:3002``) when set, for the duration of the block. Process-wide."""
    previous = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    if settings.discord_api_base_url:
        discord.http.Route.BASE = settings.discord_api_base_url.rstrip("/")
    if settings.discord_gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.discord_gateway_url)
    try:
        yield
    finally:
        discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = previous


async def start_bot(bot: SelfMindBot, token: str) -> None:
    """Log in and run until closed; start-up failures become one-line ``ConfigError``s."""
    try:
        await bot.login(token)
    except discord.LoginFailure:
        raise ConfigError(
            "DISCORD_BOT_TOKEN was refused by Discord: copy the bot token again from the "
            "Developer Portal (your application > Bot > Reset Token)"
        ) from None
    except aiohttp.ClientConnectionError as exc:
        raise ConfigError(
            f"cannot reach the Discord API at {discord.http.Route.BASE} "
            f"(DISCORD_API_BASE_URL): {type(exc).__name__}"
        ) from None
    try:
        await bot.connect()
    except discord.PrivilegedIntentsRequired:
        raise ConfigError(INTENT_HELP) from None


async def run_discord(settings: Settings, *, db_url: str) -> int:
    """Run the Discord bot until SIGTERM/SIGINT; returns the exit code (0).

    Raises ``ConfigError`` (one line naming what to fix) without ``DISCORD_BOT_TOKEN`` or
    ``ANTHROPIC_API_KEY``, for a refused token, or when the MESSAGE CONTENT intent is not
    enabled for the application.
    """
    if settings.discord_bot_token is None or not settings.discord_bot_token.get_secret_value():
        raise ConfigError(
            "DISCORD_BOT_TOKEN is not set: create a bot in the Discord Developer Portal "
            "and put its token in the environment or .env"
        )
    token = settings.discord_bot_token.get_secret_value()
    # SelfMind has no voice features: skip discord.py's start-up warnings about voice libraries.
    discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
    with discord_endpoints(settings):
        async with open_runtime(settings, db_url=db_url, require_model=True, start=False) as rt:
            bot = SelfMindBot(rt)
            loop = asyncio.get_running_loop()
            stops: list[asyncio.Task[None]] = []
            handled: list[signal.Signals] = []
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(
                        sig, lambda: stops.append(loop.create_task(bot.close()))
                    )
                    handled.append(sig)
            try:
                async with bot:
                    await start_bot(bot, token)
            finally:
                for sig in handled:
                    loop.remove_signal_handler(sig)
                if stops:
                    await asyncio.gather(*stops, return_exceptions=True)
    logger.info("discord bot stopped")
    return 0
