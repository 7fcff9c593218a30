"""The Discord adapter (``selfmind discord``): a thin discord.py 2.x client over the core.

One composition root, :func:`run_discord`: the runtime (store, Claude, reflector, turn loop)
is opened with ``async with`` and injected into :class:`SelfMindBot`, whose ``setup_hook``
resumes pending reflections and syncs the slash commands (to ``DISCORD_GUILD_ID`` when set,
instant; globally otherwise).

A message the bot should answer (see :mod:`bots.discord_bot.routing`) is checked against
the team allow-lists (:mod:`core.chat.controls`: silence in channels outside them, one line in a
DM), claimed and stored through :class:`core.chat.intake.Intake` (``discord:msg:{id}``, so a
gateway replay after RESUME never answers twice; the message is stored before any answer
shows), and answered in its conversation: memory key ``discord:{user_id}``, origin
``private`` in DMs and ``shared`` in servers, workspace = the guild id. The answer streams by
message edits through :mod:`core.streaming.reply` (2,000-character roll-over, typing indicator;
see :mod:`bots.discord_bot.sink`); nothing it says pings anyone. When a reflection stores a
memory, a 🧠 reaction appears on the user's message (``SELFMIND_DISCORD_MEMORY_REACTIONS``);
the channel is read back from the conversation key, so reflections resumed after a restart
react too. The answer is stored once Discord shows it whole (the final edit succeeded): a
crash or a Discord error before that leaves the message unanswered, and the next start-up
answers it (within :data:`core.chat.intake.RECOVERY_WINDOW`; Discord never redelivers) into
the messages the cut answer left (:meth:`DiscordReplyPlace.shown_reply`), edited in place,
so the user sees one answer. A user's first DM gets a one-line notice that the bot
remembers and how to manage it. Slash commands: :mod:`bots.discord_bot.commands`
(``/memories cleanup``: :mod:`bots.discord_bot.cleanup`).

The gateway is kept by discord.py's own reconnect loop (RESUME, replay), with its backoff
capped (:class:`CappedBackoff`); a token Discord stops taking while the bot runs (gateway
close 4004, a REST 401 on any call) closes the bot and :func:`start_bot` raises one
``ConfigError`` naming the fix (exit 1; the next start answers what was stored).

``DISCORD_API_BASE_URL`` / ``DISCORD_GATEWAY_URL`` point discord.py at a Discord-compatible
server (self-hosted Spacebar, the test fake) by setting ``discord.http.Route.BASE`` and
``DiscordWebSocket.DEFAULT_GATEWAY`` for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import aiohttp
import discord
import discord.client
import discord.gateway
import discord.http
import yarl
from discord.backoff import ExponentialBackoff

from bots.discord_bot.channel_memory import add_channel_commands
from bots.discord_bot.cleanup import add_cleanup_command
from bots.discord_bot.commands import GuardedTree, add_memory_commands, on_tree_error, user_key_of
from bots.discord_bot.files import file_origins, file_refs
from bots.discord_bot.platform import settings_stream_config
from bots.discord_bot.routing import Conversations, Route, channel_of, message_text, where_of
from bots.discord_bot.sink import NO_MENTIONS, DiscordSink, partial_message
from core.chat.controls import NOT_ENABLED, Place
from core.chat.intake import Intake, Received
from core.chat.loop import IncomingMessage, TurnLoop
from core.errors import NOT_SAVED, ConfigError, SelfMindError, storage_failed
from core.memory.reflection import ReflectionResult, Reflector
from core.runtime import Runtime, open_runtime
from core.settings import Settings, missing
from core.store.locks import KeyedLocks
from core.streaming.reply import stream_reply
from core.types import Turn

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
TOKEN_REFUSED = (
    "DISCORD_BOT_TOKEN no longer works ({}): copy the bot token again from the Developer "
    "Portal (your application > Bot > Reset Token) and set it as DISCORD_BOT_TOKEN"
)
"""Discord closes the gateway with 4004 (authentication failed) and answers REST calls with
401 once a bot token is reset; no retry fixes that, so the process stops with this line
(exit 1: a process manager restarts it) and the next start answers what was stored."""
AUTHENTICATION_FAILED = 4004
MAX_RATELIMIT_WAIT_S = 30.0
"""A 429 asking for a longer wait reaches the streamer as ``RateLimited`` (discord.py's
smallest allowed ``max_ratelimit_timeout``)."""
MAX_REPLY_SCAN = 1000
"""At most this many messages are read to find an answer a crash left on screen."""


class CappedBackoff(ExponentialBackoff[bool]):
    """discord.py's reconnect backoff, uniform(0, 2^n) s with n growing per failure (full
    jitter), scaled by ``base_s`` and with n capped so that no wait exceeds ``max_s``.

    discord.py 2.7 caps n at 10 (waits up to 1,024 s) and resets it only after 2^11 s without
    a failure, so a few short outages within half an hour push the next wait towards 17
    minutes (bench/reconnect.py: a 1.5 s outage, three times, took up to 18.7 s to recover).
    """

    def __init__(self, *, base_s: float, max_s: float) -> None:
        super().__init__(base=1)
        self._scale_s = base_s
        self._max = max(1, math.floor(math.log2(max(max_s / base_s, 2.0))))

    def delay(self) -> float:
        """The next wait in seconds, in [0, ``max_s``]."""
        return float(super().delay()) * self._scale_s


class ReconnectLogLine(logging.Filter):
    """Turns discord.py's "Attempting a reconnect in %.2fs" (ERROR with a traceback, once per
    failed attempt) into one INFO line naming the error."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "Attempting a reconnect in %.2fs" and record.args:
            error = record.exc_info[1] if record.exc_info else None
            reason = type(error).__name__ if error is not None else "unknown"
            record.msg = "discord gateway: connection attempt failed (%s), next in %.2f s"
            record.args = (reason, *tuple(record.args))
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        return True


def place_of(message: discord.Message) -> Place:
    """Where a message comes from, for the allow-lists (a thread counts as its channel)."""
    channel = message.channel
    channel_id = channel.parent_id if isinstance(channel, discord.Thread) else channel.id
    return Place(
        platform="discord",
        user_key=user_key_of(message.author),
        workspace=str(message.guild.id) if message.guild is not None else None,
        channel=str(channel_id),
        private=message.guild is None,
    )


class DiscordReplyPlace:
    """The :class:`core.chat.intake.ReplyPlace` of one user message: the answer streams by
    edits into its channel, the first message replying to it."""

    def __init__(self, bot: SelfMindBot, message: discord.Message, conversation_key: str) -> None:
        self._bot = bot
        self._message = message
        self._key = conversation_key

    async def shown_reply(self) -> list[str]:
        """The bot's messages an interrupted answer left, oldest first: its first message
        (the bot's reply to this message, by its message reference) and the roll-over
        messages the bot posted after it, up to the bot's next reply to another message.
        Read from Discord (at most :data:`MAX_REPLY_SCAN` messages after this one); empty
        when there are none or the channel cannot be read."""
        me = self._bot.user
        found: list[str] = []
        if me is None:
            return found
        try:
            history = self._message.channel.history(
                after=self._message, limit=MAX_REPLY_SCAN, oldest_first=True
            )
            async for m in history:
                if m.author.id != me.id:
                    continue
                ref = m.reference.message_id if m.reference is not None else None
                if not found:
                    if ref == self._message.id:
                        found.append(str(m.id))
                elif ref is None:
                    found.append(str(m.id))
                else:
                    break
        except (discord.HTTPException, aiohttp.ClientError) as exc:
            logger.warning("could not read the reply to %s: %s", self._message.id, exc)
            return []
        return found

    async def show(self, deltas: AsyncIterator[str], *, reuse: Sequence[str]) -> None:
        """Stream the answer; returns once Discord shows it whole, else raises."""
        channel = self._message.channel
        for stale in reuse[1:]:
            try:
                await partial_message(channel, int(stale)).delete()
            except (discord.HTTPException, SelfMindError) as exc:
                logger.warning("could not delete a cut reply message: %s", exc)
        sink = DiscordSink(
            channel,
            reply_to=self._message,
            on_post=lambda message_id: self._bot.conversations.remember(message_id, self._key),
            reuse=int(reuse[0]) if reuse else None,
        )
        try:
            result = await stream_reply(sink, deltas, self._bot.stream_config)
        finally:
            await sink.close()
        logger.info(
            "answered message=%s conversation=%s messages=%d chars=%d error=%s",
            self._message.id,
            self._key,
            len(result.messages),
            len(result.text),
            type(result.error).__name__ if result.error else None,
        )

    async def say(self, text: str) -> None:
        await self._message.reply(text, allowed_mentions=NO_MENTIONS)


class SelfMindBot(discord.Client):
    """The Discord client with the runtime injected (see :func:`run_discord`).

    ``guild_ready_timeout``: seconds discord.py waits for more GUILD_CREATEs before
    ``on_ready`` (tests lower it).
    """

    def __init__(self, rt: Runtime, *, guild_ready_timeout: float = 2.0) -> None:
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
        self.stream_config = settings_stream_config(self.settings)
        self.tree = GuardedTree(self, controls=rt.loop.controls)
        self.tree.error(on_tree_error)
        add_memory_commands(self.tree, service=rt.service)
        self.reviews = rt.reviews
        add_cleanup_command(self.tree, reviews=self.reviews)
        add_channel_commands(self.tree, team=rt.loop.team)
        self.intake = Intake(loop=rt.loop)
        self.conversations = Conversations(
            intake=self.intake, turns=rt.loop, history_turns=self.settings.history_turns
        )
        self._locks = KeyedLocks()  # one per conversation: answers run in message order
        self._file_origins = file_origins(self.settings.discord_api_base_url)
        self._inflight: set[asyncio.Task[object]] = set()
        self._closing = False
        self.refused: ConfigError | None = None
        """Set when Discord stopped taking the token (a REST 401): the bot closes."""
        self._closer: asyncio.Task[None] | None = None
        self._watch_unauthorized()

    def _watch_unauthorized(self) -> None:
        """Every REST call goes through ``HTTPClient.request`` (discord.py 2.7 has no hook for
        its responses): a 401 there, wherever its error is caught later, stops the bot."""
        request = self.http.request

        async def watched(route: discord.http.Route, **kwargs: Any) -> Any:
            try:
                return await request(route, **kwargs)
            except discord.HTTPException as exc:
                if exc.status == 401 and self.is_ready():
                    self.token_refused(f"HTTP 401 on {route.method} {route.path}")
                raise

        self.http.request = watched  # type: ignore[method-assign]

    def token_refused(self, reason: str) -> None:
        """Discord refused the token: record it (the first reason wins) and close the bot
        (answers in flight finish or fail first); :func:`start_bot` then raises it."""
        if self.refused is not None:
            return
        self.refused = ConfigError(TOKEN_REFUSED.format(reason))
        logger.warning("discord bot token refused (%s): stopping", reason)
        self._closer = asyncio.get_running_loop().create_task(self.close(), name="discord-close")

    # --- lifecycle

    async def setup_hook(self) -> None:
        """Resume pending reflections (and scheduled cleanups), then sync the slash commands."""
        # Before reflections resume: messages a crash left without an answer.
        unanswered = await self.intake.unanswered(conversation_prefix="discord:")
        # The turn loop's start-up work and the cleanup scheduler; notes of what is learned
        await self.rt.start(on_learned=self.on_learned)
        for turn in unanswered:
            self._track(asyncio.create_task(self.recover(turn), name=f"discord-recover-{turn.id}"))
        guild_id = self.settings.discord_guild_id
        try:
            if guild_id is not None:
                guild = discord.Object(id=guild_id)
                self.tree.copy_global_to(guild=guild)
                synced = await self.tree.sync(guild=guild)
            else:
                synced = await self.tree.sync()
        except discord.Forbidden:
            where = f"DISCORD_GUILD_ID: server {guild_id}" if guild_id is not None else "Discord"
            raise ConfigError(
                f"{where} refused the slash commands; invite the bot with the bot and "
                "applications.commands scopes"
            ) from None
        scope = f"server {guild_id}" if guild_id is not None else "all servers (global)"
        logger.info("synced %d slash commands to %s", len(synced), scope)

    async def connect(self, *, reconnect: bool = True) -> None:
        """discord.py's gateway loop (it RESUMEs after drops and retries refused connections
        forever), with two changes for the time it runs: its backoff capped at
        ``SELFMIND_RECONNECT_BACKOFF_MAX_S`` (:class:`CappedBackoff`) and each failed attempt
        logged as one INFO line (:class:`ReconnectLogLine`)."""
        names = vars(discord.client)  # Client.connect looks ExponentialBackoff up here
        previous = names["ExponentialBackoff"]
        settings = self.settings
        log_line = ReconnectLogLine()
        client_log = logging.getLogger("discord.client")

        def backoff() -> CappedBackoff:
            return CappedBackoff(
                base_s=settings.reconnect_backoff_s, max_s=settings.reconnect_backoff_max_s
            )

        names["ExponentialBackoff"] = backoff
        client_log.addFilter(log_line)
        try:
            await super().connect(reconnect=reconnect)
        finally:
            names["ExponentialBackoff"] = previous
            client_log.removeFilter(log_line)

    async def on_ready(self) -> None:
        assert self.user is not None
        self.rt.readiness.connected("discord")
        logger.info(
            "connected as %s (id %s), %d servers", self.user, self.user.id, len(self.guilds)
        )

    async def on_resumed(self) -> None:
        self.rt.readiness.connected("discord")

    async def on_disconnect(self) -> None:
        self.rt.readiness.disconnected("discord")

    async def close(self) -> None:
        """Stop taking messages, let answers in flight and reflections finish (each bounded by
        ``shutdown_timeout_s``, so their reactions still land), then disconnect."""
        if not self._closing:
            # Messages discord.py has already dispatched (their handlers scheduled, not yet
            # run) are taken like those in flight: Discord never sends them again.
            await asyncio.sleep(0)
            self._closing = True
            timeout = self.settings.shutdown_timeout_s
            if not await self.wait_idle(timeout):
                logger.warning("shutdown: answers still in flight after %s s", timeout)
            await self.reflector.drain(timeout)  # the scheduler stops with the runtime
        await super().close()

    async def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no message is being handled; False if ``timeout_s`` passed first."""
        pending = {t for t in self._inflight if not t.done()}
        if not pending:
            return True
        _, not_done = await asyncio.wait(pending, timeout=timeout_s)
        return not not_done

    # --- messages

    def _track(self, task: asyncio.Task[object]) -> None:
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def on_message(self, message: discord.Message) -> None:
        """The message edge: route, check the allow-lists, claim and store once
        (:class:`core.chat.intake.Intake`), answer; errors end here as one short line in
        the channel."""
        me = self.user
        if self._closing or me is None:
            return
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            place = place_of(message)
            allowed = self.turns.controls.allows(place)
            if not allowed and not place.private:
                return  # outside the allow-lists the bot stays silent in servers
            route = await self.conversations.route(message, me=me)
            if route is None:
                return
            await self.answer(message, route, workspace=place.workspace, allowed=allowed)
        except SelfMindError as exc:
            logger.warning("message %s failed: %s", message.id, type(exc).__name__)
            await self._tell(message, NOT_SAVED if storage_failed(exc) else exc.user_message)
        except discord.Forbidden as exc:
            logger.warning(
                "message %s: missing permission in channel %s (code %s); give the bot View "
                "Channel, Send Messages, Send Messages in Threads, Read Message History and "
                "Add Reactions",
                message.id,
                message.channel.id,
                exc.code,
            )
        except discord.HTTPException as exc:
            if exc.status != 401:
                logger.exception("message %s failed", message.id)
            else:  # the bot stops with the line that names the fix (token_refused)
                logger.warning("message %s not answered: HTTP 401", message.id)
        except Exception as exc:
            if storage_failed(exc):
                logger.warning("message %s not saved: %s", message.id, type(exc).__name__)
                await self._tell(message, NOT_SAVED)
                return
            logger.exception("message %s failed", message.id)
            await self._tell(message, GENERIC_ERROR)
        finally:
            if task is not None:
                self._inflight.discard(task)

    async def answer(
        self,
        message: discord.Message,
        route: Route,
        *,
        workspace: str | None = None,
        allowed: bool = True,
    ) -> None:
        """Claim and store the message (seeding its conversation once), then stream the
        answer into the channel; the answer is stored once Discord shows it whole."""
        me = self.user
        assert me is not None
        self.conversations.remember(message.id, route.key)
        text = message_text(message, bot_id=me.id)
        files = file_refs(message.attachments, origins=self._file_origins)
        say = None if text or files else EMPTY_MENTION_REPLY
        incoming = IncomingMessage(
            user_key=user_key_of(message.author),
            conversation_key=route.key,
            text=text,
            origin=route.origin,
            sent_at=message.created_at,
            author=message.author.display_name,
            platform_ref=str(message.id),
            where=route.where,
            workspace=workspace,
            files=files,
            place=route.place,
        )
        async with self._locks.hold(route.key):

            async def seed() -> None:
                await self.conversations.seed_once(message, route, me=me)

            # Stored before any answer shows (after the thread's earlier messages, so they
            # come first in its history); a store failure ends here, answered NOT_SAVED.
            received = await self.intake.receive(
                incoming,
                flight_key=f"discord:{message.id}",
                claim_keys=[f"discord:msg:{message.id}"],
                say=NOT_ENABLED if not allowed else say,
                before_store=seed,
            )
            if received is None:
                logger.info("message %s already claimed (gateway replay); skipped", message.id)
                return
            await self._respond(message, incoming, received)

    async def recover(self, turn: Turn) -> None:
        """Answer a stored message a crash left unanswered (start-up), into what the
        interrupted answer left on screen; skipped when its message is gone."""
        channel_id = channel_of(turn.conversation_key)
        ref = turn.platform_ref
        if channel_id is None or ref is None or not ref.isdigit() or turn.user_key is None:
            return
        received = await self.intake.recovered(turn, flight_key=f"discord:{ref}")
        if received is None:
            return
        incoming = IncomingMessage(
            user_key=turn.user_key,
            conversation_key=turn.conversation_key,
            text=turn.text,
            origin=turn.origin,
            sent_at=turn.sent_at,
            author=turn.author,
            platform_ref=ref,
            where=where_of(turn.conversation_key),
            workspace=turn.workspace,
            place=turn.place,
        )
        try:
            message = await self.get_partial_messageable(channel_id).fetch_message(int(ref))
        except discord.HTTPException as exc:
            logger.warning("message %s left unanswered is gone: HTTP %s", turn.id, exc.status)
            self.intake.release(received)
            return
        try:
            async with self._locks.hold(turn.conversation_key):
                self.conversations.remember(message.id, turn.conversation_key)
                await self._respond(message, incoming, received)
        except Exception:
            logger.exception("recovering message %s failed", turn.id)

    async def _respond(
        self, message: discord.Message, incoming: IncomingMessage, received: Received
    ) -> None:
        if (
            received.say is None
            and incoming.origin == "private"
            and await self.intake.once(f"discord:first-dm:{message.author.id}")
        ):
            await message.channel.send(FIRST_DM_NOTICE, allowed_mentions=NO_MENTIONS)
        place = DiscordReplyPlace(self, message, incoming.conversation_key)
        await self.intake.respond(incoming, received, place)

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
    except discord.ConnectionClosed as exc:
        # discord.py closes the client itself on the close codes it cannot recover from.
        if exc.code == AUTHENTICATION_FAILED:
            raise ConfigError(
                TOKEN_REFUSED.format("gateway closed with 4004, authentication failed")
            ) from None
        raise
    if bot.refused is not None:
        raise bot.refused


async def run_discord(settings: Settings, *, db_url: str) -> int:
    """Run the Discord bot until SIGTERM/SIGINT; returns the exit code (0).

    Raises ``ConfigError`` (one line naming what to fix) without ``DISCORD_BOT_TOKEN`` or
    ``ANTHROPIC_API_KEY``, for a refused token (at start-up, or later: gateway close 4004, a
    REST 401), or when the MESSAGE CONTENT intent is not enabled for the application.
    """
    if settings.discord_bot_token is None or not settings.discord_bot_token.get_secret_value():
        raise missing("DISCORD_BOT_TOKEN", "the token of your bot (Discord Developer Portal > Bot)")
    token = settings.discord_bot_token.get_secret_value()
    settings.require_model_key()  # before the database and the network
    # SelfMind has no voice features: skip discord.py's start-up warnings about voice libraries.
    discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
    with discord_endpoints(settings):
        async with open_runtime(
            settings,
            db_url=db_url,
            require_model=True,
            start=False,
            serve_health=True,
            migrate=True,  # a bot's start applies pending migrations, each logged by name
        ) as rt:
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
