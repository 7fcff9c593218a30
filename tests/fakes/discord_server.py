"""A local fake Discord (REST under ``/api/v10`` and the gateway) for the real discord.py client.

Built against discord.py 2.7.1 and the Discord API v10 documentation
(https://discord.com/developers/docs). One aiohttp server on ``127.0.0.1`` (ephemeral port)
serves:

- ``/api/v10/...``: the REST routes the bot uses (users, applications, channels, messages,
  typing, reactions, DMs, threads, command sync, interaction callbacks, webhook followups).
  Every call is recorded as a :class:`RecordedRequest`. Every JSON answer carries
  ``Content-Type: application/json`` exactly: with ``; charset=...`` discord.py returns the
  body as a string and crashes later.
- ``/gateway`` and ``/resume``: the gateway, JSON text frames ``{op, d, s, t}``, no
  compression (discord.py asks for ``zlib-stream`` but handles plain text frames).
- ``/attachments/{channel}/{attachment}/{filename}``: the bytes of stored attachments, so
  ``Attachment.read()`` works.

Point the client at it with :func:`point_discord_at` (sets ``discord.http.Route.BASE`` and
``DiscordWebSocket.DEFAULT_GATEWAY``) or use :func:`running_fake_discord`.

As a process (``selfmind discord`` in another process, benchmarks):
``python -m tests.fakes.discord_server --port 0`` prints one JSON line ``{"base_url",
"api_base", "gateway_url", "token", "guild_id", "channel_id", "pid"}`` and serves until
SIGTERM; ``/_fake/...`` routes stand in for the Python helpers there:

    POST /_fake/user      ``{name}`` -> ``{id, dm_channel_id}`` (a new member of the guild)
    POST /_fake/message   ``{channel_id, author_id, content}`` -> the stored message
    POST /_fake/gateway   ``{fault: refuse, for_s?, times?}`` | ``{fault: drop}`` |
                          ``{fault: disconnect, code?}`` | ``{fault: reconnect}`` |
                          ``{fault: invalidate, resumable?}``
    GET  /_fake/messages?channel_id=   stored messages, oldest first
    GET  /_fake/state     gateway counts: identifies, resumes, connections, refused

Behaviour that mirrors Discord and that adapter code must cope with:

- Messages the bot posts (REST, interaction responses that are not ephemeral, followups) are
  echoed back as ``MESSAGE_CREATE``; edits as ``MESSAGE_UPDATE``. The echo is sent before the
  REST answer returns.
- Without the ``message_content`` intent, guild messages arrive with empty ``content``,
  ``embeds``, ``attachments`` and ``components`` unless they mention the bot or are its own.
  Asking for a privileged intent the fake does not grant closes the gateway with 4014.
- Interaction callbacks more than ``interaction_response_timeout_s`` (3 s, like Discord) after
  the dispatch, or a second callback, fail with 10062 / 40060; followups and edits of the
  response more than ``interaction_token_s`` (15 minutes, like Discord) after it fail with
  10015 "Unknown Webhook" (https://discord.com/developers/docs/interactions/
  receiving-and-responding: "Interaction tokens are valid for 15 minutes").
- Validation: content over 2,000 characters or an embed description over 4,096 gives 50035;
  an empty message gives 50006; editing another user's message gives 50005.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import fnmatch
import io
import json
import logging
import os
import re
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl
from aiohttp import web

logger = logging.getLogger(__name__)

JSON = dict[str, Any]
_T = TypeVar("_T")

DISCORD_EPOCH_MS = 1_420_070_400_000
API_VERSION_PREFIX = "/api/v10"

# Intents (https://discord.com/developers/docs/events/gateway#gateway-intents).
INTENT_GUILDS = 1 << 0
INTENT_GUILD_MEMBERS = 1 << 1
INTENT_GUILD_PRESENCES = 1 << 8
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_GUILD_MESSAGE_REACTIONS = 1 << 10
INTENT_GUILD_MESSAGE_TYPING = 1 << 11
INTENT_DIRECT_MESSAGES = 1 << 12
INTENT_DIRECT_MESSAGE_REACTIONS = 1 << 13
INTENT_DIRECT_MESSAGE_TYPING = 1 << 14
INTENT_MESSAGE_CONTENT = 1 << 15

# Message flags and channel / interaction types.
FLAG_EPHEMERAL = 1 << 6
FLAG_LOADING = 1 << 7
CHANNEL_GUILD_TEXT = 0
CHANNEL_DM = 1
CHANNEL_PUBLIC_THREAD = 11
CHANNEL_PRIVATE_THREAD = 12
INTERACTION_APPLICATION_COMMAND = 2
INTERACTION_COMPONENT = 3
INTERACTION_AUTOCOMPLETE = 4

MAX_CONTENT_CHARS = 2000
MAX_EMBED_DESCRIPTION_CHARS = 4096
ATTACHMENT_SIZE_LIMIT_BYTES = 10 * 1024 * 1024
ALL_PERMISSIONS = str(discord.Permissions.all().value)

_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")
_OPTION_TYPE_BY_PYTHON: tuple[tuple[type, int], ...] = ((bool, 5), (int, 4), (float, 10), (str, 3))


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


# ---------------------------------------------------------------------------------------------
# Public records and world objects


@dataclass(frozen=True)
class FakeUser:
    """A Discord user known to the fake. ``payload()`` is the API user object."""

    id: int
    username: str
    bot: bool = False
    global_name: str | None = None

    @property
    def mention(self) -> str:
        return f"<@{self.id}>"

    def payload(self) -> JSON:
        return {
            "id": str(self.id),
            "username": self.username,
            "discriminator": "0",
            "global_name": self.global_name,
            "avatar": None,
            "bot": self.bot,
            "public_flags": 0,
        }


@dataclass(frozen=True)
class RecordedFile:
    """One uploaded file of a multipart request (``files[n]`` field)."""

    field_name: str
    filename: str
    content_type: str
    data: bytes


@dataclass(frozen=True)
class RecordedRequest:
    """One REST call: ``path`` is decoded and relative to ``/api/v10``; ``json`` is the JSON
    body, or the parsed ``payload_json`` of a multipart body, or None."""

    method: str
    path: str
    query: Mapping[str, str]
    json: Any
    files: tuple[RecordedFile, ...]
    status: int


@dataclass(frozen=True)
class RecordedInteractionResponse:
    """One ``POST /interactions/{id}/{token}/callback``: ``type`` is the callback type
    (4 message, 5 deferred message, 6 deferred update, 7 update, 8 autocomplete, 9 modal)."""

    interaction_id: int
    type: int
    data: Mapping[str, Any]
    files: tuple[RecordedFile, ...]

    @property
    def ephemeral(self) -> bool:
        return bool(int(self.data.get("flags") or 0) & FLAG_EPHEMERAL)

    @property
    def content(self) -> str | None:
        content = self.data.get("content")
        return None if content is None else str(content)

    @property
    def choices(self) -> list[JSON]:
        return list(self.data.get("choices") or [])


@dataclass
class FakeInteraction:
    """An interaction the fake dispatched; live, so response state can be read later."""

    id: int
    token: str
    type: int
    user: FakeUser
    channel_id: int
    guild_id: int | None
    payload: JSON
    message_id: int | None = None
    created_at: float = 0.0
    response_type: int | None = None
    original_message_id: int | None = None
    followup_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class GatewayConnection:
    """One websocket connection: ``path`` is ``/gateway`` or ``/resume``; ``query`` holds
    ``v``, ``encoding`` and ``compress`` as the client sent them."""

    path: str
    query: Mapping[str, str]


@dataclass(frozen=True)
class DiscordEndpoints:
    """Where discord.py sends REST calls and opens the gateway."""

    api_base: str
    gateway: yarl.URL


def set_discord_endpoints(*, api_base: str, gateway: str | yarl.URL) -> DiscordEndpoints:
    """Point discord.py at ``api_base`` (``http://host:port/api/v10``) and ``gateway``
    (``ws://host:port/gateway``). Process-wide; returns the previous endpoints.

    discord.py builds every ``Route.url`` from ``Route.BASE`` (webhooks and interaction
    callbacks too) and adds ``?v=10&encoding=json&compress=zlib-stream`` to the gateway URL.
    RESUME goes to READY's ``resume_gateway_url``; an invalidated session starts again at
    ``DEFAULT_GATEWAY``. Set these before ``client.start()``.
    """
    previous = DiscordEndpoints(
        api_base=discord.http.Route.BASE,
        gateway=discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY,
    )
    discord.http.Route.BASE = api_base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(gateway))
    return previous


def point_discord_at(fake: FakeDiscord) -> DiscordEndpoints:
    """Point discord.py at ``fake``; returns the previous endpoints for :func:`restore_discord`."""
    return set_discord_endpoints(api_base=fake.api_base, gateway=fake.gateway_url)


def restore_discord(previous: DiscordEndpoints) -> None:
    """Undo :func:`point_discord_at` / :func:`set_discord_endpoints`."""
    set_discord_endpoints(api_base=previous.api_base, gateway=previous.gateway)


@contextlib.asynccontextmanager
async def running_fake_discord(**options: Any) -> AsyncIterator[FakeDiscord]:
    """Start a :class:`FakeDiscord` (``options`` go to its constructor), point discord.py at
    it, and undo both on exit."""
    fake = FakeDiscord(**options)
    await fake.start()
    previous = point_discord_at(fake)
    try:
        yield fake
    finally:
        restore_discord(previous)
        await fake.stop()


# ---------------------------------------------------------------------------------------------
# Internals


class _ApiError(Exception):
    def __init__(self, status: int, code: int, message: str, errors: JSON | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.errors = status, code, message, errors

    def body(self) -> JSON:
        body: JSON = {"message": self.message, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return body


def _image_size(data: bytes) -> JSON:
    """``width`` and ``height`` of an image attachment, as Discord adds them; ``{}`` else."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return {"width": image.width, "height": image.height}
    except Exception:
        return {}


def _field_error(code: str, message: str) -> JSON:
    return {"_errors": [{"code": code, "message": message}]}


@dataclass
class _Fault:
    method: str
    path_glob: str
    status: int
    body: JSON
    headers: dict[str, str]
    remaining: int

    def matches(self, method: str, path: str) -> bool:
        return self.method in ("*", method) and fnmatch.fnmatchcase(path, self.path_glob)


@dataclass
class _Call:
    method: str
    path: str
    query: Mapping[str, str]
    json: Any
    files: tuple[RecordedFile, ...]
    params: tuple[str, ...]


_Handler = Callable[[_Call], Awaitable[tuple[int, Any]]]


@dataclass
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: _Handler
    needs_auth: bool


@dataclass
class _Guild:
    id: int
    name: str
    owner_id: int
    joined_at: str
    roles: dict[int, JSON] = field(default_factory=dict)
    members: dict[int, JSON] = field(default_factory=dict)  # member objects without "user"


class _Connection:
    def __init__(self, ws: web.WebSocketResponse, info: GatewayConnection) -> None:
        self.ws = ws
        self.info = info
        self.session: _Session | None = None
        self.closed_by_server = False

    async def send(self, frame: JSON) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.send_str(json.dumps(frame))


@dataclass
class _Session:
    id: str
    intents: int
    seq: int = 0
    log: list[JSON] = field(default_factory=list)
    conn: _Connection | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _shape_for_session(intents: int, event: str, data: JSON, bot_id: int) -> JSON | None:
    """What a session with ``intents`` receives of ``event``: None when not subscribed."""
    in_guild = "guild_id" in data
    if event.startswith("MESSAGE_REACTION"):
        wanted = INTENT_GUILD_MESSAGE_REACTIONS if in_guild else INTENT_DIRECT_MESSAGE_REACTIONS
        return data if intents & wanted else None
    if event == "TYPING_START":
        wanted = INTENT_GUILD_MESSAGE_TYPING if in_guild else INTENT_DIRECT_MESSAGE_TYPING
        return data if intents & wanted else None
    if event in ("GUILD_MEMBER_ADD", "GUILD_MEMBER_UPDATE", "GUILD_MEMBER_REMOVE"):
        return data if intents & INTENT_GUILD_MEMBERS else None
    if not event.startswith("MESSAGE_"):
        return data
    if not intents & (INTENT_GUILD_MESSAGES if in_guild else INTENT_DIRECT_MESSAGES):
        return None
    if event == "MESSAGE_DELETE" or not in_guild or intents & INTENT_MESSAGE_CONTENT:
        return data
    author_id = int(data.get("author", {}).get("id", 0))
    mentioned = {int(m["id"]) for m in data.get("mentions", [])}
    if author_id == bot_id or bot_id in mentioned:
        return data
    stripped = dict(data, content="", embeds=[], attachments=[], components=[])
    stripped.pop("poll", None)
    return stripped


# ---------------------------------------------------------------------------------------------
# The fake


class FakeDiscord:
    """A fake Discord for one bot. Construct, ``await start()``, point discord.py at it, and
    ``await stop()`` (or ``async with``). A default world exists at once: ``guild_id`` with a
    text channel ``channel_id`` ("general"), the ``owner`` user and the bot's own member.

    World building (sync, before the client connects; later additions reach the client only
    through :meth:`dispatch`): :meth:`add_user`, :meth:`add_guild`, :meth:`add_text_channel`,
    :meth:`add_thread`, :meth:`add_member`, :meth:`add_role`, :meth:`dm_channel_id`.

    Privileged intents (``members``, ``presences``, ``message_content``) are granted unless
    switched off here; asking for one that is not granted closes the gateway with 4014.
    """

    def __init__(
        self,
        *,
        token: str = "fake-bot-token",
        bot_name: str = "selfmind",
        grant_message_content: bool = True,
        grant_members: bool = True,
        grant_presences: bool = True,
        heartbeat_interval_ms: int = 41_250,
        interaction_response_timeout_s: float = 3.0,
        interaction_token_s: float = 15 * 60.0,
        port: int = 0,
    ) -> None:
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.interaction_response_timeout_s = interaction_response_timeout_s
        self.interaction_token_s = interaction_token_s
        self.granted_privileged_intents = (
            (INTENT_MESSAGE_CONTENT if grant_message_content else 0)
            | (INTENT_GUILD_MEMBERS if grant_members else 0)
            | (INTENT_GUILD_PRESENCES if grant_presences else 0)
        )
        self.port = port
        self._last_snowflake = 0
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Event()

        # World.
        self._users: dict[int, FakeUser] = {}
        self._guilds: dict[int, _Guild] = {}
        self._channels: dict[int, JSON] = {}
        self._dm_by_user: dict[int, int] = {}
        self._messages: dict[int, JSON] = {}
        self._channel_messages: dict[int, list[int]] = {}
        self._attachments: dict[int, RecordedFile] = {}
        self._interactions: dict[int, FakeInteraction] = {}

        # Records.
        self.requests: list[RecordedRequest] = []
        self.interaction_responses: list[RecordedInteractionResponse] = []
        self.typing_channel_ids: list[int] = []
        self.reactions: list[tuple[str, int, int, str]] = []  # (PUT|DELETE, channel, msg, emoji)
        self.global_commands: list[JSON] = []
        self.guild_commands: dict[int, list[JSON]] = {}
        self.identifies: list[JSON] = []
        self.resumes: list[JSON] = []
        self.connections: list[GatewayConnection] = []

        self._faults: list[_Fault] = []
        self._sessions: dict[str, _Session] = {}
        self._open: set[_Connection] = set()
        self._refuse_gateway = 0
        self.revoked_tokens: list[str] = []
        self._refuse_gateway_until = 0.0
        self.refused_gateway = 0
        self._requests_of: dict[int, web.Request] = {}
        self._routes = self._build_routes()

        self.bot_user = self.add_user(bot_name, bot=True, guilds=())
        self.application_id = self.bot_user.id
        self.owner = self.add_user("owner", guilds=())
        self.guild_id = self.add_guild("SelfMind Test", owner=self.owner)
        self.channel_id = self.add_text_channel(self.guild_id, "general")

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on ``127.0.0.1`` at an ephemeral port (then ``self.port``)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", API_VERSION_PREFIX + "/{tail:.*}", self._handle_api)
        app.router.add_get("/gateway", self._handle_gateway)
        app.router.add_get("/resume", self._handle_gateway)
        app.router.add_get("/attachments/{channel}/{attachment}/{filename}", self._handle_cdn)
        app.router.add_route("*", "/_fake/{what}", self._handle_control)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Close open gateway connections (code 1001) and the server."""
        for conn in list(self._open):
            conn.closed_by_server = True
            await conn.ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.url}{API_VERSION_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def resume_gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/resume"

    # -- world building -------------------------------------------------------------------------

    def snowflake(self) -> int:
        """A new, strictly increasing snowflake carrying the current time."""
        candidate = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_snowflake = max(candidate, self._last_snowflake + 1)
        return self._last_snowflake

    def add_user(
        self,
        username: str,
        *,
        bot: bool = False,
        global_name: str | None = None,
        guilds: Iterable[int] | None = None,
    ) -> FakeUser:
        """A new user, made a member of ``guilds`` (default: every guild so far)."""
        user = FakeUser(self.snowflake(), username, bot=bot, global_name=global_name)
        self._users[user.id] = user
        for guild_id in self._guilds if guilds is None else guilds:
            self.add_member(guild_id, user)
        return user

    def add_guild(self, name: str, *, owner: FakeUser | None = None) -> int:
        """A guild with the ``@everyone`` role (id = guild id) and the bot as a member."""
        guild = _Guild(self.snowflake(), name, (owner or self.owner).id, _now_iso())
        guild.roles[guild.id] = {
            "id": str(guild.id),
            "name": "@everyone",
            "permissions": str(discord.Permissions.general().value),
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        self._guilds[guild.id] = guild
        self.add_member(guild.id, self.bot_user)
        if owner is not None:
            self.add_member(guild.id, owner)
        return guild.id

    def add_role(self, guild_id: int, name: str, *, permissions: int = 0) -> int:
        guild = self._guilds[guild_id]
        role_id = self.snowflake()
        guild.roles[role_id] = dict(
            guild.roles[guild_id], id=str(role_id), name=name, permissions=str(permissions)
        )
        guild.roles[role_id]["position"] = len(guild.roles) - 1
        return role_id

    def add_member(
        self, guild_id: int, user: FakeUser, *, roles: Sequence[int] = (), nick: str | None = None
    ) -> None:
        self._guilds[guild_id].members[user.id] = {
            "roles": [str(r) for r in roles],
            "nick": nick,
            "avatar": None,
            "joined_at": _now_iso(),
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "pending": False,
            "flags": 0,
            "communication_disabled_until": None,
        }

    def add_text_channel(self, guild_id: int, name: str, *, topic: str | None = None) -> int:
        channel_id = self.snowflake()
        position = sum(1 for c in self._channels.values() if c.get("guild_id") == str(guild_id))
        self._channels[channel_id] = {
            "id": str(channel_id),
            "type": CHANNEL_GUILD_TEXT,
            "guild_id": str(guild_id),
            "name": name,
            "topic": topic,
            "position": position,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "rate_limit_per_user": 0,
            "last_message_id": None,
            "flags": 0,
        }
        return channel_id

    def add_thread(
        self,
        parent_id: int,
        name: str,
        *,
        owner: FakeUser | None = None,
        private: bool = False,
        thread_id: int | None = None,
    ) -> int:
        """A thread under a text channel; ``thread_id`` defaults to a new snowflake (a thread
        started from a message has that message's id)."""
        parent = self._channels[parent_id]
        thread_id = thread_id or self.snowflake()
        self._channels[thread_id] = {
            "id": str(thread_id),
            "type": CHANNEL_PRIVATE_THREAD if private else CHANNEL_PUBLIC_THREAD,
            "guild_id": parent["guild_id"],
            "parent_id": str(parent_id),
            "owner_id": str((owner or self.bot_user).id),
            "name": name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _now_iso(),
                "locked": False,
                "invitable": True,
                "create_timestamp": _now_iso(),
            },
        }
        return thread_id

    def dm_channel_id(self, user: FakeUser) -> int:
        """The DM channel between the bot and ``user`` (created on first use)."""
        if user.id not in self._dm_by_user:
            channel_id = self.snowflake()
            self._dm_by_user[user.id] = channel_id
            self._channels[channel_id] = {
                "id": str(channel_id),
                "type": CHANNEL_DM,
                "last_message_id": None,
                "flags": 0,
                "recipients": [user.payload()],
            }
        return self._dm_by_user[user.id]

    def channel(self, channel_id: int) -> JSON:
        """The channel object (a copy), as ``GET /channels/{id}`` returns it."""
        return copy.deepcopy(self._channels[channel_id])

    def guild_id_of(self, channel_id: int) -> int | None:
        guild_id = self._channels[channel_id].get("guild_id")
        return None if guild_id is None else int(guild_id)

    def message(self, message_id: int) -> JSON:
        """A stored message (a copy, REST form)."""
        return copy.deepcopy(self._messages[message_id])

    def messages_in(self, channel_id: int) -> list[JSON]:
        """Stored, non-ephemeral messages of a channel, oldest first (copies)."""
        return [self.message(mid) for mid in self._channel_messages.get(channel_id, [])]

    # -- recording and waiting ------------------------------------------------------------------

    def find_requests(self, method: str, path_glob: str) -> list[RecordedRequest]:
        """Recorded calls whose method matches (``*`` for any) and whose path matches the
        ``fnmatch`` glob (``*`` crosses ``/``), e.g. ``/channels/*/messages``."""
        method = method.upper()
        return [
            r
            for r in self.requests
            if method in ("*", r.method) and fnmatch.fnmatchcase(r.path, path_glob)
        ]

    async def wait_for_request(
        self, method: str, path_glob: str, *, count: int = 1, timeout_s: float = 5.0
    ) -> RecordedRequest:
        """Wait until ``count`` matching calls are recorded; returns the ``count``-th."""

        def found() -> RecordedRequest | None:
            matches = self.find_requests(method, path_glob)
            return matches[count - 1] if len(matches) >= count else None

        return await self._wait_until(found, timeout_s, f"request #{count} {method} {path_glob}")

    async def wait_for_interaction_response(
        self, interaction: FakeInteraction | int, *, timeout_s: float = 5.0
    ) -> RecordedInteractionResponse:
        interaction_id = interaction if isinstance(interaction, int) else interaction.id

        def found() -> RecordedInteractionResponse | None:
            return next(
                (r for r in self.interaction_responses if r.interaction_id == interaction_id),
                None,
            )

        return await self._wait_until(found, timeout_s, f"response to interaction {interaction_id}")

    async def wait_for_session(self, *, count: int = 1, timeout_s: float = 5.0) -> None:
        """Wait until ``count`` IDENTIFYs were accepted and READY + GUILD_CREATEs sent."""
        await self._wait_until(
            lambda: True if len(self.identifies) >= count else None, timeout_s, "gateway session"
        )

    async def wait_for_resume(self, *, count: int = 1, timeout_s: float = 5.0) -> None:
        await self._wait_until(
            lambda: True if len(self.resumes) >= count else None, timeout_s, "gateway RESUME"
        )

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_until(self, probe: Callable[[], _T | None], timeout_s: float, what: str) -> _T:
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    changed = self._changed
                    result = probe()
                    if result is not None:
                        return result
                    await changed.wait()
        except TimeoutError:
            recent = [f"{r.method} {r.path} -> {r.status}" for r in self.requests[-10:]]
            raise TimeoutError(f"no {what} within {timeout_s}s; last requests: {recent}") from None

    # -- faults ---------------------------------------------------------------------------------

    def rate_limit_next(
        self,
        method: str,
        path_glob: str,
        *,
        retry_after: float = 0.05,
        times: int = 1,
        is_global: bool = False,
    ) -> None:
        """Answer the next ``times`` matching calls with 429, as Discord does: JSON
        ``{message, retry_after, global}``, a ``Via`` header (without it discord.py assumes a
        Cloudflare ban and raises) and ``X-RateLimit-*`` headers. discord.py sleeps
        ``retry_after`` seconds and retries (up to 5 tries in all)."""
        headers = {
            "Via": "1.1 google",
            "Retry-After": str(max(1, round(retry_after))),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
            "X-RateLimit-Reset-After": f"{retry_after:.3f}",
            "X-RateLimit-Bucket": "fake-bucket",
            "X-RateLimit-Scope": "shared" if is_global else "user",
        }
        if is_global:
            headers["X-RateLimit-Global"] = "true"
        body = {"message": "You are being rate limited.", "retry_after": retry_after}
        body["global"] = is_global
        self._faults.append(_Fault(method.upper(), path_glob, 429, body, headers, times))

    def fail_next(
        self,
        method: str,
        path_glob: str,
        *,
        status: int = 400,
        code: int = 50035,
        message: str = "Invalid Form Body",
        errors: JSON | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` matching calls with a Discord JSON error, e.g. 404/10008
        (Unknown Message) or 400/50035. discord.py raises NotFound (404), Forbidden (403),
        HTTPException (other 4xx); it retries 500/502/504 itself, sleeping 1 + 2n s."""
        body = _ApiError(status, code, message, errors).body()
        self._faults.append(_Fault(method.upper(), path_glob, status, body, {}, times))

    def clear_faults(self) -> None:
        """Forget the faults still queued by :meth:`fail_next` / :meth:`rate_limit_next`."""
        self._faults.clear()

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if fault.matches(method, path):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    # -- gateway: public ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return any(s.conn is not None for s in self._sessions.values())

    async def dispatch(self, event: str, data: JSON) -> None:
        """Send a dispatch (op 0) to every live session, filtered by its intents. A session
        whose connection is down keeps it for replay on RESUME. Raises RuntimeError when no
        session exists (the client has not identified yet, or has closed)."""
        if not self._sessions:
            raise RuntimeError(f"no gateway session to dispatch {event} to")
        await self._broadcast(event, data)

    async def disconnect(self, *, code: int = 4000) -> None:
        """Close the live connection(s) with ``code``. discord.py RESUMEs after codes other
        than 4004 and 4010-4014 (and after 1000 from the server); 4014 raises
        PrivilegedIntentsRequired, the others in that list end ``client.start()``."""
        for conn in list(self._open):
            conn.closed_by_server = True
            if conn.session is not None and conn.session.conn is conn:
                conn.session.conn = None  # from now on dispatches wait in the log for RESUME
            await conn.ws.close(code=code, message=b"fake disconnect")

    async def revoke_token(self, *, close_gateway: bool = True) -> str:
        """Reset the bot token, as the Developer Portal's Reset Token does: REST calls with
        the old one get 401, IDENTIFY and RESUME with it are closed with 4004 (authentication
        failed), and, when ``close_gateway``, the live connections are closed with 4004 now.
        Returns the new token (now ``token``)."""
        self.revoked_tokens.append(self.token)
        self.token = f"fake-bot-token-{len(self.revoked_tokens) + 1}"
        if close_gateway:
            await self.disconnect(code=4004)
        return self.token

    def refuse_gateway(self, *, times: int = 0, for_s: float = 0.0) -> None:
        """Refuse the next ``times`` gateway handshakes, and every one for the next ``for_s``
        seconds, with HTTP 503 (the gateway unreachable for a while). discord.py retries with
        its ExponentialBackoff (uniform(0, 2^n) s, n up to 10) and then RESUMEs."""
        self._refuse_gateway += times
        self._refuse_gateway_until = max(self._refuse_gateway_until, time.monotonic() + for_s)

    async def drop(self) -> None:
        """Reset every gateway connection's TCP stream with no close frame (a network drop);
        the session stays, so the client can RESUME and get what it missed."""
        for conn in list(self._open):
            conn.closed_by_server = True
            if conn.session is not None and conn.session.conn is conn:
                conn.session.conn = None
            request = self._requests_of.get(id(conn))
            if request is not None and request.transport is not None:
                request.transport.abort()

    async def request_reconnect(self) -> None:
        """Send op 7 RECONNECT: the client closes and RESUMEs."""
        for conn in list(self._open):
            await conn.send({"op": 7, "d": None, "s": None, "t": None})

    async def invalidate_session(self, *, resumable: bool = False) -> None:
        """Send op 9 INVALID_SESSION; unless ``resumable`` the session is forgotten and the
        client IDENTIFYs again (discord.py 2.7 reuses the resume URL if it resumed before)."""
        for conn in list(self._open):
            if not resumable and conn.session is not None:
                self._sessions.pop(conn.session.id, None)
            await conn.send({"op": 9, "d": resumable, "s": None, "t": None})

    # -- gateway: dispatch helpers --------------------------------------------------------------

    async def dispatch_message(
        self,
        channel_id: int,
        author: FakeUser,
        content: str,
        *,
        mentions: Sequence[FakeUser] | None = None,
        reply_to: int | None = None,
        attachments: Sequence[tuple[str, bytes] | tuple[str, bytes, str]] = (),
    ) -> JSON:
        """A user posts in a guild channel, thread or DM (see :meth:`dm_channel_id`):
        stores the message and dispatches MESSAGE_CREATE. ``mentions`` defaults to the users
        mentioned in ``content`` (``<@id>``); ``reply_to`` makes it a reply (type 19 with
        ``message_reference`` and ``referenced_message``). Returns the stored message."""
        if channel_id not in self._channels:
            raise KeyError(f"unknown channel {channel_id}")
        files = tuple(
            RecordedFile(f"files[{i}]", spec[0], (*spec, "application/octet-stream")[2], spec[1])
            for i, spec in enumerate(attachments)
        )
        referenced = self._messages.get(reply_to) if reply_to is not None else None
        if reply_to is not None and referenced is None:
            raise KeyError(f"unknown message {reply_to}")
        user_ids, role_ids, everyone = self._parse_mentions(content, None, referenced)
        if mentions is not None:
            user_ids = [u.id for u in mentions]
        message = self._store_message(
            channel_id=channel_id,
            author=author,
            content=content,
            attachments=self._new_attachments(channel_id, None, files),
            user_ids=user_ids,
            role_ids=role_ids,
            everyone=everyone,
            referenced=referenced,
        )
        await self.dispatch("MESSAGE_CREATE", self._gateway_message(message))
        return copy.deepcopy(message)

    async def dispatch_thread_create(self, thread_id: int) -> None:
        """Announce a thread added with :meth:`add_thread` after the client connected."""
        await self.dispatch("THREAD_CREATE", dict(self.channel(thread_id), newly_created=True))

    async def dispatch_slash_command(
        self,
        name: str,
        *,
        user: FakeUser,
        channel_id: int | None = None,
        options: Mapping[str, Any] | None = None,
        permissions: int | None = None,
    ) -> FakeInteraction:
        """A user runs ``/name`` (``"group sub"`` for subcommands) with ``options`` by name:
        INTERACTION_CREATE type 2. Option types come from the synced command when there is
        one, else from the Python value (bool 5, int 4, float 10, str 3, FakeUser 6).
        ``permissions``: the member's resolved permissions there (default: all)."""
        data = self._command_data(name, channel_id or self.channel_id, options or {}, None)
        return await self.dispatch_interaction(
            INTERACTION_APPLICATION_COMMAND,
            data,
            user=user,
            channel_id=channel_id,
            permissions=permissions,
        )

    async def dispatch_autocomplete(
        self,
        name: str,
        *,
        user: FakeUser,
        focused: str,
        options: Mapping[str, Any],
        channel_id: int | None = None,
    ) -> FakeInteraction:
        """Autocomplete (type 4) for option ``focused`` of ``/name``; ``options`` holds what
        the user has typed so far, ``focused`` included."""
        data = self._command_data(name, channel_id or self.channel_id, options, focused)
        return await self.dispatch_interaction(
            INTERACTION_AUTOCOMPLETE, data, user=user, channel_id=channel_id
        )

    async def dispatch_component(
        self,
        message_id: int,
        custom_id: str,
        *,
        user: FakeUser,
        component_type: int = 2,
        values: Sequence[str] | None = None,
    ) -> FakeInteraction:
        """A click on a component (button: type 2; selects: pass ``values``) of a stored
        message: INTERACTION_CREATE type 3 with the full ``message``. discord.py routes it to
        the View stored for that message id and ``custom_id``."""
        message = self._messages[message_id]
        data: JSON = {"custom_id": custom_id, "component_type": component_type}
        if values is not None:
            data["values"] = list(values)
        return await self.dispatch_interaction(
            INTERACTION_COMPONENT,
            data,
            user=user,
            channel_id=int(message["channel_id"]),
            message_id=message_id,
        )

    async def dispatch_interaction(
        self,
        interaction_type: int,
        data: JSON,
        *,
        user: FakeUser,
        channel_id: int | None = None,
        message_id: int | None = None,
        permissions: int | None = None,
    ) -> FakeInteraction:
        """Low level: INTERACTION_CREATE of ``interaction_type`` with ``data``, in a guild
        channel (``member``) or a DM (``user``), with every field discord.py 2.7 reads
        (``attachment_size_limit``, ``app_permissions``, ``context``, ...)."""
        channel_id = channel_id or self.channel_id
        guild_id = self.guild_id_of(channel_id)
        interaction = FakeInteraction(
            id=self.snowflake(),
            token=f"itok-{secrets.token_urlsafe(24)}",
            type=interaction_type,
            user=user,
            channel_id=channel_id,
            guild_id=guild_id,
            payload={},
            message_id=message_id,
            created_at=asyncio.get_running_loop().time(),
        )
        payload: JSON = {
            "id": str(interaction.id),
            "application_id": str(self.application_id),
            "type": interaction_type,
            "data": data,
            "token": interaction.token,
            "version": 1,
            "channel": self.channel(channel_id),
            "channel_id": str(channel_id),
            "locale": "en-US",
            "app_permissions": ALL_PERMISSIONS,
            "entitlements": [],
            "entitlement_sku_ids": [],
            "attachment_size_limit": ATTACHMENT_SIZE_LIMIT_BYTES,
        }
        if guild_id is not None:
            member = self._guilds[guild_id].members.get(user.id) or {"roles": [], "flags": 0}
            payload.update(
                guild_id=str(guild_id),
                guild={"id": str(guild_id), "locale": "en-US", "features": []},
                guild_locale="en-US",
                member=dict(
                    copy.deepcopy(member),
                    user=user.payload(),
                    permissions=ALL_PERMISSIONS if permissions is None else str(permissions),
                ),
                authorizing_integration_owners={"0": str(guild_id)},
                context=0,
            )
        else:
            payload.update(
                user=user.payload(), authorizing_integration_owners={"0": "0"}, context=1
            )
        if message_id is not None:
            payload["message"] = self._gateway_message(self._messages[message_id])
        interaction.payload = payload
        self._interactions[interaction.id] = interaction
        await self.dispatch("INTERACTION_CREATE", payload)
        return interaction

    # -- gateway: server side -------------------------------------------------------------------

    async def _handle_gateway(self, request: web.Request) -> web.WebSocketResponse:
        if self._refuse_gateway > 0 or time.monotonic() < self._refuse_gateway_until:
            self._refuse_gateway = max(0, self._refuse_gateway - 1)
            self.refused_gateway += 1
            self._notify()
            raise web.HTTPServiceUnavailable(text="refused by the fake")
        ws = web.WebSocketResponse(timeout=2.0)
        await ws.prepare(request)
        conn = _Connection(ws, GatewayConnection(request.path, dict(request.query)))
        self.connections.append(conn.info)
        self._open.add(conn)
        self._requests_of[id(conn)] = request
        try:
            await conn.send(
                {
                    "op": 10,
                    "d": {"heartbeat_interval": self.heartbeat_interval_ms},
                    "s": None,
                    "t": None,
                }
            )
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.TEXT:
                    await self._on_frame(conn, json.loads(msg.data))
        finally:
            self._open.discard(conn)
            self._requests_of.pop(id(conn), None)
            session = conn.session
            if session is not None and session.conn is conn:
                session.conn = None
                # A client that closes with 1000/1001 ends its session, as on Discord.
                if not conn.closed_by_server and ws.close_code in (1000, 1001):
                    self._sessions.pop(session.id, None)
            self._notify()
        return ws

    async def _on_frame(self, conn: _Connection, frame: JSON) -> None:
        op, d = frame.get("op"), frame.get("d") or {}
        if op == 1:
            await conn.send({"op": 11, "d": None, "s": None, "t": None})
        elif op == 2:
            await self._identify(conn, d)
        elif op == 6:
            await self._resume(conn, d)
        elif op == 8 and conn.session is not None:
            await self._send_member_chunk(conn.session, d)
        elif op not in (3, 4):
            logger.warning("fake discord: unhandled gateway op %s", op)

    async def _identify(self, conn: _Connection, d: JSON) -> None:
        if d.get("token") != self.token:
            conn.closed_by_server = True
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(d.get("intents", 0))
        privileged = INTENT_MESSAGE_CONTENT | INTENT_GUILD_MEMBERS | INTENT_GUILD_PRESENCES
        if intents & privileged & ~self.granted_privileged_intents:
            conn.closed_by_server = True
            await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        session = _Session(id=secrets.token_hex(16), intents=intents)
        self._sessions[session.id] = session
        async with session.lock:
            session.conn, conn.session = conn, session
            await self._emit_locked(session, "READY", self._ready_payload(session))
            for guild in self._guilds.values():
                await self._emit_locked(session, "GUILD_CREATE", self._guild_create(guild, intents))
        self.identifies.append(d)
        self._notify()

    async def _resume(self, conn: _Connection, d: JSON) -> None:
        if d.get("token") in self.revoked_tokens:
            conn.closed_by_server = True
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        session = self._sessions.get(str(d.get("session_id")))
        if session is None or d.get("token") != self.token:
            await conn.send({"op": 9, "d": False, "s": None, "t": None})
            return
        async with session.lock:
            session.conn, conn.session = conn, session
            last_seen = int(d.get("seq") or 0)
            for frame in session.log:
                if frame["s"] > last_seen:
                    await conn.send(frame)
            await self._emit_locked(session, "RESUMED", {"_trace": ["fake-discord"]})
        self.resumes.append(d)
        self._notify()

    async def _send_member_chunk(self, session: _Session, d: JSON) -> None:
        guild = self._guilds.get(int(d.get("guild_id", 0)))
        if guild is None:
            return
        chunk: JSON = {
            "guild_id": str(guild.id),
            "members": self._member_list(guild, True),
            "chunk_index": 0,
            "chunk_count": 1,
        }
        if d.get("nonce") is not None:
            chunk["nonce"] = d["nonce"]
        async with session.lock:
            await self._emit_locked(session, "GUILD_MEMBERS_CHUNK", chunk)

    async def _emit_locked(self, session: _Session, event: str, data: JSON) -> None:
        session.seq += 1
        frame = {"op": 0, "t": event, "s": session.seq, "d": data}
        session.log.append(frame)
        if session.conn is not None:
            await session.conn.send(frame)

    async def _broadcast(self, event: str, data: JSON) -> None:
        for session in list(self._sessions.values()):
            shaped = _shape_for_session(session.intents, event, data, self.bot_user.id)
            if shaped is not None:
                async with session.lock:
                    await self._emit_locked(session, event, shaped)

    def _ready_payload(self, session: _Session) -> JSON:
        user = dict(self.bot_user.payload(), verified=True, mfa_enabled=False, flags=0)
        return {
            "v": 10,
            "user": user,
            "guilds": [{"id": str(g), "unavailable": True} for g in self._guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.resume_gateway_url,
            "application": {"id": str(self.application_id), "flags": self._application_flags()},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "user_settings": {},
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": ["local"],
            "auth": {},
            "_trace": ["fake-discord"],
        }

    def _member_list(self, guild: _Guild, everyone: bool) -> list[JSON]:
        return [
            dict(copy.deepcopy(m), user=self._users[uid].payload())
            for uid, m in guild.members.items()
            if everyone or uid == self.bot_user.id
        ]

    def _guild_create(self, guild: _Guild, intents: int) -> JSON:
        """GUILD_CREATE. Without GUILD_MEMBERS only the bot's own member is sent, like
        Discord; ``member_count`` is always the full count (with the intent it equals the
        members sent, else discord.py would wait for member chunks)."""
        channels = [c for c in self._channels.values() if c.get("guild_id") == str(guild.id)]
        thread_types = (CHANNEL_PUBLIC_THREAD, CHANNEL_PRIVATE_THREAD)
        return {
            "id": str(guild.id),
            "name": guild.name,
            "icon": None,
            "owner_id": str(guild.owner_id),
            "unavailable": False,
            "large": False,
            "member_count": len(guild.members),
            "joined_at": guild.joined_at,
            "roles": list(copy.deepcopy(guild.roles).values()),
            "channels": [copy.deepcopy(c) for c in channels if c["type"] not in thread_types],
            "threads": [copy.deepcopy(c) for c in channels if c["type"] in thread_types],
            "members": self._member_list(guild, bool(intents & INTENT_GUILD_MEMBERS)),
            "presences": [],
            "voice_states": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "verification_level": 0,
            "default_message_notifications": 1,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "system_channel_id": None,
            "afk_timeout": 300,
        }

    def _application_flags(self) -> int:
        granted = self.granted_privileged_intents
        return (
            (1 << 19 if granted & INTENT_MESSAGE_CONTENT else 0)  # GATEWAY_MESSAGE_CONTENT_LIMITED
            | (1 << 15 if granted & INTENT_GUILD_MEMBERS else 0)  # GATEWAY_GUILD_MEMBERS_LIMITED
            | (1 << 13 if granted & INTENT_GUILD_PRESENCES else 0)  # GATEWAY_PRESENCE_LIMITED
            | 1 << 23  # APPLICATION_COMMAND_BADGE
        )

    # -- messages -------------------------------------------------------------------------------

    def _parse_mentions(
        self, content: str, allowed: Mapping[str, Any] | None, referenced: JSON | None
    ) -> tuple[list[int], list[int], bool]:
        """Users and roles mentioned in ``content`` and whether @everyone/@here pings,
        filtered by ``allowed_mentions`` like Discord (None: everything pings)."""
        users = [int(u) for u in _USER_MENTION.findall(content) if int(u) in self._users]
        roles = [int(r) for r in _ROLE_MENTION.findall(content)]
        everyone = "@everyone" in content or "@here" in content
        replied = int(referenced["author"]["id"]) if referenced else None
        if allowed is not None:
            parse = set(allowed.get("parse") or [])
            allowed_users = {int(u) for u in allowed.get("users") or []}
            allowed_roles = {int(r) for r in allowed.get("roles") or []}
            users = [u for u in users if "users" in parse or u in allowed_users]
            roles = [r for r in roles if "roles" in parse or r in allowed_roles]
            everyone = everyone and "everyone" in parse
            if not allowed.get("replied_user"):
                replied = None
        if replied is not None and replied not in users:
            users.append(replied)
        return list(dict.fromkeys(users)), list(dict.fromkeys(roles)), everyone

    def _store_message(
        self,
        *,
        channel_id: int,
        author: FakeUser,
        content: str,
        attachments: list[JSON],
        user_ids: Sequence[int] = (),
        role_ids: Sequence[int] = (),
        everyone: bool = False,
        referenced: JSON | None = None,
        body: Mapping[str, Any] | None = None,
        flags: int = 0,
        message_type: int = 0,
        extra: JSON | None = None,
    ) -> JSON:
        body = body or {}
        message_id = self.snowflake()
        message: JSON = {
            "id": str(message_id),
            "channel_id": str(channel_id),
            "author": author.payload(),
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": bool(body.get("tts", False)),
            "mention_everyone": everyone,
            "mentions": [self._users[u].payload() for u in user_ids],
            "mention_roles": [str(r) for r in role_ids],
            "attachments": attachments,
            "embeds": list(body.get("embeds") or []),
            "components": list(body.get("components") or []),
            "reactions": [],
            "pinned": False,
            "type": 19 if referenced is not None and message_type == 0 else message_type,
            "flags": flags,
        }
        if body.get("nonce") is not None:
            message["nonce"] = body["nonce"]
        if referenced is not None:
            message["message_reference"] = {
                "type": 0,
                "message_id": referenced["id"],
                "channel_id": referenced["channel_id"],
                "guild_id": self._channels[int(referenced["channel_id"])].get("guild_id"),
            }
            message["referenced_message"] = {
                k: v for k, v in referenced.items() if k != "referenced_message"
            }
        message.update(extra or {})
        self._messages[message_id] = message
        if not flags & FLAG_EPHEMERAL:
            self._channel_messages.setdefault(channel_id, []).append(message_id)
            channel = self._channels[channel_id]
            channel["last_message_id"] = str(message_id)
            if "message_count" in channel:
                channel["message_count"] += 1
                channel["total_message_sent"] += 1
        return message

    def _gateway_message(self, message: JSON) -> JSON:
        """The gateway form of a stored message: adds ``guild_id``, the author's ``member``
        and each mention's ``member`` in guild channels."""
        data = copy.deepcopy(message)
        guild_id = self.guild_id_of(int(message["channel_id"]))
        if guild_id is None:
            return data
        members = self._guilds[guild_id].members
        data["guild_id"] = str(guild_id)
        author_member = members.get(int(message["author"]["id"]))
        if author_member is not None and "webhook_id" not in message:
            data["member"] = copy.deepcopy(author_member)
        for mention in data["mentions"]:
            if int(mention["id"]) in members:
                mention["member"] = copy.deepcopy(members[int(mention["id"])])
        return data

    def _new_attachments(
        self, channel_id: int, specs: Sequence[JSON] | None, files: Sequence[RecordedFile]
    ) -> list[JSON]:
        """Attachment objects for uploaded ``files``; ``specs`` is the payload's
        ``attachments`` list (``{id: n, filename, description}`` for ``files[n]``)."""
        by_field = {f.field_name: f for f in files}
        specs = specs if specs is not None else [{"id": i} for i in range(len(files))]
        result = []
        for spec in specs:
            upload = by_field.get(f"files[{spec.get('id')}]")
            if upload is None:
                continue
            attachment_id = self.snowflake()
            filename = str(spec.get("filename") or upload.filename)
            self._attachments[attachment_id] = upload
            # Signed like Discord's CDN links (expiry, issue time, signature).
            signed = f"ex={0x7FFFFFFF:x}&is={0x60000000:x}&hm={attachment_id:x}"
            url = f"{self.url}/attachments/{channel_id}/{attachment_id}/{filename}?{signed}"
            attachment: JSON = {
                "id": str(attachment_id),
                "filename": filename,
                "size": len(upload.data),
                "url": url,
                "proxy_url": url,
                "content_type": upload.content_type,
            } | _image_size(upload.data)
            if spec.get("description"):
                attachment["description"] = spec["description"]
            result.append(attachment)
        return result

    def _validate_message_body(self, body: Mapping[str, Any]) -> None:
        content = body.get("content")
        if content is not None and len(str(content)) > MAX_CONTENT_CHARS:
            raise _ApiError(
                400,
                50035,
                "Invalid Form Body",
                {
                    "content": _field_error(
                        "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length."
                    )
                },
            )
        for index, embed in enumerate(body.get("embeds") or []):
            if len(str(embed.get("description") or "")) > MAX_EMBED_DESCRIPTION_CHARS:
                error = _field_error("BASE_TYPE_MAX_LENGTH", "Must be 4096 or fewer in length.")
                raise _ApiError(
                    400,
                    50035,
                    "Invalid Form Body",
                    {"embeds": {str(index): {"description": error}}},
                )

    def _require_content(self, body: Mapping[str, Any], *, has_files: bool) -> None:
        keys = ("content", "embeds", "components", "sticker_ids", "poll")
        if not has_files and not any(body.get(k) for k in keys):
            raise _ApiError(400, 50006, "Cannot send an empty message")

    def _apply_edit(
        self, message: JSON, body: Mapping[str, Any], files: Sequence[RecordedFile]
    ) -> None:
        self._validate_message_body(body)
        if "content" in body:
            message["content"] = str(body["content"] or "")
        for key in ("embeds", "components"):
            if key in body:
                message[key] = list(body[key] or [])
        if body.get("flags") is not None:  # ephemeral cannot be switched by an edit
            ephemeral = int(message["flags"]) & FLAG_EPHEMERAL
            message["flags"] = (int(body["flags"]) & ~FLAG_EPHEMERAL) | ephemeral
        if "attachments" in body or files:
            specs = list(body.get("attachments") or [])
            kept_ids = {str(s.get("id")) for s in specs}
            kept = [a for a in message["attachments"] if a["id"] in kept_ids]
            message["attachments"] = kept + self._new_attachments(
                int(message["channel_id"]), specs or None, files
            )
        if "allowed_mentions" in body or "content" in body:
            users, roles, everyone = self._parse_mentions(
                message["content"], body.get("allowed_mentions"), None
            )
            message.update(
                mentions=[self._users[u].payload() for u in users],
                mention_roles=[str(r) for r in roles],
                mention_everyone=everyone,
            )
        message["flags"] = int(message["flags"]) & ~FLAG_LOADING
        message["edited_timestamp"] = _now_iso()

    # -- REST: plumbing -------------------------------------------------------------------------

    def _build_routes(self) -> list[_Route]:
        table: list[tuple[str, str, _Handler, bool]] = [
            ("GET", r"/users/@me", self._get_me, True),
            ("GET", r"/users/(\d+)", self._get_user, True),
            ("POST", r"/users/@me/channels", self._open_dm, True),
            ("GET", r"/oauth2/applications/@me", self._get_application, True),
            ("GET", r"/applications/@me", self._get_application, True),
            ("GET", r"/gateway", self._get_gateway, False),
            ("GET", r"/gateway/bot", self._get_gateway_bot, True),
            ("GET", r"/guilds/(\d+)", self._get_guild, True),
            ("GET", r"/guilds/(\d+)/members/(\d+)", self._get_member, True),
            ("GET", r"/channels/(\d+)", self._get_channel, True),
            ("GET", r"/channels/(\d+)/messages", self._get_history, True),
            ("POST", r"/channels/(\d+)/messages", self._post_message, True),
            ("GET", r"/channels/(\d+)/messages/(\d+)", self._get_message, True),
            ("PATCH", r"/channels/(\d+)/messages/(\d+)", self._edit_message, True),
            ("DELETE", r"/channels/(\d+)/messages/(\d+)", self._delete_message, True),
            ("POST", r"/channels/(\d+)/typing", self._typing, True),
            ("PUT", r"/channels/(\d+)/messages/(\d+)/reactions/([^/]+)/@me", self._react, True),
            ("DELETE", r"/channels/(\d+)/messages/(\d+)/reactions/([^/]+)/@me", self._react, True),
            ("POST", r"/channels/(\d+)/messages/(\d+)/threads", self._create_thread, True),
            ("POST", r"/channels/(\d+)/threads", self._create_thread, True),
            ("PUT", r"/channels/(\d+)/thread-members/@me", self._join_thread, True),
            ("GET", r"/applications/(\d+)/commands", self._get_commands, True),
            ("PUT", r"/applications/(\d+)/commands", self._put_commands, True),
            ("GET", r"/applications/(\d+)/guilds/(\d+)/commands", self._get_commands, True),
            ("PUT", r"/applications/(\d+)/guilds/(\d+)/commands", self._put_commands, True),
            ("POST", r"/interactions/(\d+)/([^/]+)/callback", self._interaction_callback, False),
            ("POST", r"/webhooks/(\d+)/([^/]+)", self._post_followup, False),
            (
                "GET",
                r"/webhooks/(\d+)/([^/]+)/messages/(@original|\d+)",
                self._webhook_message,
                False,
            ),
            (
                "PATCH",
                r"/webhooks/(\d+)/([^/]+)/messages/(@original|\d+)",
                self._webhook_message,
                False,
            ),
            (
                "DELETE",
                r"/webhooks/(\d+)/([^/]+)/messages/(@original|\d+)",
                self._webhook_message,
                False,
            ),
        ]
        return [_Route(m, re.compile(p), h, a) for m, p, h, a in table]

    async def _read_body(self, request: web.Request) -> tuple[Any, tuple[RecordedFile, ...]]:
        if request.content_type == "multipart/form-data":
            form = await request.post()
            payload: Any = None
            files: list[RecordedFile] = []
            for name, value in form.items():
                if isinstance(value, web.FileField):
                    data = value.file.read()
                    content_type = value.content_type or "application/octet-stream"
                    files.append(RecordedFile(name, value.filename, content_type, data))
                elif name == "payload_json":
                    payload = json.loads(str(value))
            return payload, tuple(files)
        raw = await request.read()
        if raw and request.content_type == "application/json":
            return json.loads(raw), ()
        return None, ()

    @staticmethod
    def _json_response(
        status: int, body: Any, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        if body is None and status == 204:
            return web.Response(status=204, headers=dict(headers or {}))
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        return web.Response(status=status, body=json.dumps(body).encode(), headers=all_headers)

    async def _handle_api(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["tail"]
        method = request.method
        body, files = await self._read_body(request)
        status, payload, headers = await self._route(request, method, path, body, files)
        self.requests.append(
            RecordedRequest(method, path, dict(request.query), body, files, status)
        )
        self._notify()
        return self._json_response(status, payload, headers)

    async def _route(
        self,
        request: web.Request,
        method: str,
        path: str,
        body: Any,
        files: tuple[RecordedFile, ...],
    ) -> tuple[int, Any, dict[str, str]]:
        fault = self._take_fault(method, path)
        if fault is not None:
            return fault.status, fault.body, fault.headers
        matched = [(r, m) for r in self._routes if (m := r.pattern.fullmatch(path))]
        route_match = next(((r, m) for r, m in matched if r.method == method), None)
        if route_match is None:
            status, message = (
                (405, "405: Method Not Allowed") if matched else (404, "404: Not Found")
            )
            return status, {"message": message, "code": 0}, {}
        route, match = route_match
        if route.needs_auth and request.headers.get("Authorization") != f"Bot {self.token}":
            return 401, {"message": "401: Unauthorized", "code": 0}, {}
        call = _Call(method, path, dict(request.query), body, files, match.groups())
        try:
            status, payload = await route.handler(call)
        except _ApiError as error:
            return error.status, error.body(), {}
        headers = {
            "X-RateLimit-Limit": "50",
            "X-RateLimit-Remaining": "49",
            "X-RateLimit-Reset": f"{time.time() + 1:.3f}",
            "X-RateLimit-Reset-After": "1.000",
            "X-RateLimit-Bucket": f"fake-{route.pattern.pattern}",
        }
        return status, payload, headers

    async def _handle_cdn(self, request: web.Request) -> web.Response:
        upload = self._attachments.get(int(request.match_info["attachment"]))
        if upload is None:
            return web.Response(status=404)
        return web.Response(body=upload.data, headers={"Content-Type": upload.content_type})

    def _channel_or_404(self, channel_id: int) -> JSON:
        if channel_id not in self._channels:
            raise _ApiError(404, 10003, "Unknown Channel")
        return self._channels[channel_id]

    def _message_or_404(self, channel_id: int, message_id: int) -> JSON:
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            raise _ApiError(404, 10008, "Unknown Message")
        return message

    # -- REST: users, applications, guilds, channels --------------------------------------------

    async def _get_me(self, call: _Call) -> tuple[int, Any]:
        return 200, dict(self.bot_user.payload(), verified=True, mfa_enabled=False, flags=0)

    async def _get_user(self, call: _Call) -> tuple[int, Any]:
        user = self._users.get(int(call.params[0]))
        if user is None:
            raise _ApiError(404, 10013, "Unknown User")
        return 200, user.payload()

    async def _open_dm(self, call: _Call) -> tuple[int, Any]:
        user = self._users.get(int((call.json or {}).get("recipient_id", 0)))
        if user is None:
            raise _ApiError(400, 50035, "Invalid Form Body")
        return 200, self.channel(self.dm_channel_id(user))

    async def _get_application(self, call: _Call) -> tuple[int, Any]:
        return 200, {
            "id": str(self.application_id),
            "name": self.bot_user.username,
            "icon": None,
            "description": "",
            "summary": "",
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "flags": self._application_flags(),
            "owner": self.owner.payload(),
            "team": None,
            "bot": self.bot_user.payload(),
            "interactions_endpoint_url": None,
            "redirect_uris": [],
            "tags": [],
        }

    async def _get_gateway(self, call: _Call) -> tuple[int, Any]:
        return 200, {"url": self.gateway_url}

    async def _get_gateway_bot(self, call: _Call) -> tuple[int, Any]:
        limit = {"total": 1000, "remaining": 999, "reset_after": 86_400_000, "max_concurrency": 1}
        return 200, {"url": self.gateway_url, "shards": 1, "session_start_limit": limit}

    async def _get_guild(self, call: _Call) -> tuple[int, Any]:
        guild = self._guilds.get(int(call.params[0]))
        if guild is None:
            raise _ApiError(404, 10004, "Unknown Guild")
        data = self._guild_create(guild, 0)
        for key in ("channels", "threads", "members", "presences", "voice_states", "joined_at"):
            data.pop(key, None)
        return 200, data

    async def _get_member(self, call: _Call) -> tuple[int, Any]:
        guild = self._guilds.get(int(call.params[0]))
        member = guild.members.get(int(call.params[1])) if guild else None
        if guild is None or member is None:
            raise _ApiError(404, 10007, "Unknown Member")
        return 200, dict(copy.deepcopy(member), user=self._users[int(call.params[1])].payload())

    async def _get_channel(self, call: _Call) -> tuple[int, Any]:
        return 200, copy.deepcopy(self._channel_or_404(int(call.params[0])))

    async def _typing(self, call: _Call) -> tuple[int, Any]:
        self.typing_channel_ids.append(int(self._channel_or_404(int(call.params[0]))["id"]))
        return 204, None

    async def _create_thread(self, call: _Call) -> tuple[int, Any]:
        parent_id = int(call.params[0])
        parent = self._channel_or_404(parent_id)
        if parent["type"] != CHANNEL_GUILD_TEXT:
            raise _ApiError(400, 50024, "Cannot execute action on this channel type")
        body = call.json or {}
        from_message = int(call.params[1]) if len(call.params) > 1 else None
        if from_message is not None:
            self._message_or_404(parent_id, from_message)
            if from_message in self._channels:
                raise _ApiError(400, 160004, "A thread has already been created for this message")
        private = from_message is None and int(body.get("type", CHANNEL_PRIVATE_THREAD)) == 12
        thread_id = self.add_thread(
            parent_id, str(body.get("name", "thread")), private=private, thread_id=from_message
        )
        thread = self._channels[thread_id]
        if body.get("auto_archive_duration"):
            thread["thread_metadata"]["auto_archive_duration"] = int(body["auto_archive_duration"])
        await self._broadcast("THREAD_CREATE", dict(copy.deepcopy(thread), newly_created=True))
        return 201, copy.deepcopy(thread)

    async def _join_thread(self, call: _Call) -> tuple[int, Any]:
        self._channel_or_404(int(call.params[0]))
        return 204, None

    # -- REST: messages -------------------------------------------------------------------------

    async def _get_history(self, call: _Call) -> tuple[int, Any]:
        """``GET /channels/{id}/messages``: newest first, ``limit`` (default 50, max 100) and
        one of ``before``/``after``/``around``, as Discord pages them."""
        channel_id = int(call.params[0])
        self._channel_or_404(channel_id)
        ids = self._channel_messages.get(channel_id, [])
        limit = max(1, min(100, int(call.query.get("limit", 50))))
        if "before" in call.query:
            selected = [i for i in ids if i < int(call.query["before"])][-limit:]
        elif "after" in call.query:
            selected = [i for i in ids if i > int(call.query["after"])][:limit]
        elif "around" in call.query:
            around = int(call.query["around"])
            older = [i for i in ids if i < around][-(limit // 2) :] if limit > 1 else []
            newer = [i for i in ids if i >= around][: limit - len(older)]
            selected = older + newer
        else:
            selected = ids[-limit:]
        return 200, [copy.deepcopy(self._messages[i]) for i in reversed(selected)]

    async def _get_message(self, call: _Call) -> tuple[int, Any]:
        message = self._message_or_404(int(call.params[0]), int(call.params[1]))
        return 200, copy.deepcopy(message)

    async def _post_message(self, call: _Call) -> tuple[int, Any]:
        channel_id = int(call.params[0])
        self._channel_or_404(channel_id)
        body: JSON = call.json or {}
        self._validate_message_body(body)
        self._require_content(body, has_files=bool(call.files))
        referenced = None
        reference = body.get("message_reference")
        if reference:
            referenced = self._messages.get(int(reference.get("message_id", 0)))
            if referenced is None and reference.get("fail_if_not_exists", True):
                error = _field_error("MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message")
                raise _ApiError(400, 50035, "Invalid Form Body", {"message_reference": error})
        content = str(body.get("content") or "")
        users, roles, everyone = self._parse_mentions(
            content, body.get("allowed_mentions"), referenced
        )
        message = self._store_message(
            channel_id=channel_id,
            author=self.bot_user,
            content=content,
            attachments=self._new_attachments(channel_id, body.get("attachments"), call.files),
            user_ids=users,
            role_ids=roles,
            everyone=everyone,
            referenced=referenced,
            body=body,
            flags=int(body.get("flags") or 0),
        )
        await self._broadcast("MESSAGE_CREATE", self._gateway_message(message))
        return 200, copy.deepcopy(message)

    async def _edit_message(self, call: _Call) -> tuple[int, Any]:
        message = self._message_or_404(int(call.params[0]), int(call.params[1]))
        if int(message["author"]["id"]) != self.bot_user.id:
            raise _ApiError(403, 50005, "Cannot edit a message authored by another user")
        self._apply_edit(message, call.json or {}, call.files)
        await self._broadcast("MESSAGE_UPDATE", self._gateway_message(message))
        return 200, copy.deepcopy(message)

    async def _delete_message(self, call: _Call) -> tuple[int, Any]:
        channel_id = int(call.params[0])
        message = self._message_or_404(channel_id, int(call.params[1]))
        await self._remove_message(message)
        return 204, None

    async def _remove_message(self, message: JSON) -> None:
        message_id, channel_id = int(message["id"]), int(message["channel_id"])
        del self._messages[message_id]
        ids = self._channel_messages.get(channel_id, [])
        if message_id in ids:
            ids.remove(message_id)
            event: JSON = {"id": str(message_id), "channel_id": str(channel_id)}
            guild_id = self.guild_id_of(channel_id)
            if guild_id is not None:
                event["guild_id"] = str(guild_id)
            await self._broadcast("MESSAGE_DELETE", event)

    async def _react(self, call: _Call) -> tuple[int, Any]:
        channel_id, message_id, emoji = int(call.params[0]), int(call.params[1]), call.params[2]
        message = self._message_or_404(channel_id, message_id)
        self.reactions.append((call.method, channel_id, message_id, emoji))
        name, _, emoji_id = emoji.partition(":")
        reactions: list[JSON] = message["reactions"]
        current = next((r for r in reactions if r["emoji"]["name"] == name), None)
        if call.method == "PUT" and current is None:
            reactions.append(
                {
                    "count": 1,
                    "me": True,
                    "emoji": {"id": emoji_id or None, "name": name},
                    "count_details": {"burst": 0, "normal": 1},
                    "burst_colors": [],
                    "me_burst": False,
                    "burst_count": 0,
                }
            )
        elif call.method == "DELETE" and current is not None:
            reactions.remove(current)
        return 204, None

    # -- REST: application commands -------------------------------------------------------------

    async def _get_commands(self, call: _Call) -> tuple[int, Any]:
        if len(call.params) > 1:
            return 200, copy.deepcopy(self.guild_commands.get(int(call.params[1]), []))
        return 200, copy.deepcopy(self.global_commands)

    async def _put_commands(self, call: _Call) -> tuple[int, Any]:
        """Bulk overwrite; a command keeps its id across syncs (matched by name and type)."""
        guild_id = int(call.params[1]) if len(call.params) > 1 else None
        existing = (
            self.global_commands if guild_id is None else self.guild_commands.get(guild_id, [])
        )
        old_ids = {(c["name"], c.get("type", 1)): c["id"] for c in existing}
        commands = []
        for spec in call.json or []:
            command: JSON = {
                "type": 1,
                "description": "",
                "options": [],
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                "integration_types": [0],
                "contexts": None,
                **spec,
            }
            key = (command["name"], command["type"])
            command.update(
                id=old_ids.get(key) or str(self.snowflake()),
                application_id=str(self.application_id),
                version=str(self.snowflake()),
            )
            if guild_id is not None:
                command["guild_id"] = str(guild_id)
            commands.append(command)
        if guild_id is None:
            self.global_commands = commands
        else:
            self.guild_commands[guild_id] = commands
        return 200, copy.deepcopy(commands)

    def _find_command(self, name: str, guild_id: int | None) -> JSON | None:
        candidates = (
            self.guild_commands.get(guild_id, []) if guild_id else []
        ) + self.global_commands
        return next((c for c in candidates if c["name"] == name and c.get("type", 1) == 1), None)

    def _command_data(
        self, name: str, channel_id: int, options: Mapping[str, Any], focused: str | None
    ) -> JSON:
        top, *subs = name.split()
        command = self._find_command(top, self.guild_id_of(channel_id))
        data: JSON = {
            "id": command["id"] if command else str(self.snowflake()),
            "name": top,
            "type": 1,
        }
        if command is not None and "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        definitions: list[JSON] = list(command.get("options") or []) if command else []
        resolved: JSON = {}
        container = data
        for depth, sub in enumerate(subs):
            definition = next((d for d in definitions if d.get("name") == sub), {})
            sub_type = int(definition.get("type", 2 if depth < len(subs) - 1 else 1))
            option: JSON = {"name": sub, "type": sub_type, "options": []}
            container["options"] = [option]
            container, definitions = option, list(definition.get("options") or [])
        container["options"] = [
            self._option(key, value, definitions, focused, resolved, channel_id)
            for key, value in options.items()
        ]
        if resolved:
            data["resolved"] = resolved
        return data

    def _option(
        self,
        name: str,
        value: Any,
        definitions: Sequence[JSON],
        focused: str | None,
        resolved: JSON,
        channel_id: int,
    ) -> JSON:
        definition = next((d for d in definitions if d.get("name") == name), None)
        if definition is not None:
            option_type = int(definition["type"])
        elif isinstance(value, FakeUser):
            option_type = 6
        else:
            option_type = next((t for py, t in _OPTION_TYPE_BY_PYTHON if isinstance(value, py)), 3)
        option: JSON = {"name": name, "type": option_type, "value": value}
        if isinstance(value, FakeUser):
            option["value"] = str(value.id)
            resolved.setdefault("users", {})[str(value.id)] = value.payload()
            guild_id = self.guild_id_of(channel_id)
            member = self._guilds[guild_id].members.get(value.id) if guild_id else None
            if member is not None:
                resolved.setdefault("members", {})[str(value.id)] = copy.deepcopy(member)
        if name == focused:
            option["focused"] = True
            option["value"] = str(value)
        return option

    # -- REST: interaction responses and followups ----------------------------------------------

    def _interaction_message(
        self,
        interaction: FakeInteraction,
        body: Mapping[str, Any],
        files: Sequence[RecordedFile],
        flags: int,
    ) -> JSON:
        self._validate_message_body(body)
        content = str(body.get("content") or "")
        users, roles, everyone = self._parse_mentions(content, body.get("allowed_mentions"), None)
        metadata = {
            "id": str(interaction.id),
            "type": interaction.type,
            "user": interaction.user.payload(),
            "authorizing_integration_owners": interaction.payload["authorizing_integration_owners"],
        }
        command = interaction.type == INTERACTION_APPLICATION_COMMAND
        return self._store_message(
            channel_id=interaction.channel_id,
            author=self.bot_user,
            content=content,
            attachments=self._new_attachments(
                interaction.channel_id, body.get("attachments"), files
            ),
            user_ids=users,
            role_ids=roles,
            everyone=everyone,
            body=body,
            flags=flags,
            message_type=20 if command else 0,
            extra={
                "webhook_id": str(self.application_id),
                "application_id": str(self.application_id),
                "interaction_metadata": metadata,
            },
        )

    async def _echo(self, event: str, message: JSON) -> None:
        if not int(message["flags"]) & FLAG_EPHEMERAL:
            await self._broadcast(event, self._gateway_message(message))

    async def _interaction_callback(self, call: _Call) -> tuple[int, Any]:
        """``POST /interactions/{id}/{token}/callback``. discord.py 2.7 always sends
        ``?with_response=1`` and parses ``{interaction: {...}, resource: {type, message}}``
        for message responses; the fake answers 200 JSON for every type."""
        interaction = self._interactions.get(int(call.params[0]))
        if interaction is None or interaction.token != call.params[1]:
            raise _ApiError(404, 10062, "Unknown interaction")
        elapsed = asyncio.get_running_loop().time() - interaction.created_at
        if elapsed > self.interaction_response_timeout_s:
            raise _ApiError(404, 10062, "Unknown interaction")
        if interaction.response_type is not None:
            raise _ApiError(400, 40060, "Interaction has already been acknowledged.")
        body: JSON = call.json or {}
        response_type = int(body.get("type", 0))
        data: JSON = body.get("data") or {}
        if response_type in (4, 7):
            self._validate_message_body(data)
        if response_type == 4:
            self._require_content(data, has_files=bool(call.files))
        interaction.response_type = response_type
        self.interaction_responses.append(
            RecordedInteractionResponse(interaction.id, response_type, data, call.files)
        )
        self._notify()
        flags = int(data.get("flags") or 0)
        callback: JSON = {
            "id": str(interaction.id),
            "type": interaction.type,
            "response_message_loading": response_type == 5,
            "response_message_ephemeral": bool(flags & FLAG_EPHEMERAL),
        }
        answer: JSON = {"interaction": callback}
        message: JSON | None = None
        if response_type in (4, 5):
            message_flags = flags | (FLAG_LOADING if response_type == 5 else 0)
            message_body = data if response_type == 4 else {}
            message = self._interaction_message(
                interaction, message_body, call.files, message_flags
            )
            interaction.original_message_id = int(message["id"])
            await self._echo("MESSAGE_CREATE", message)
        elif response_type == 7 and interaction.message_id is not None:
            message = self._messages[interaction.message_id]
            self._apply_edit(message, data, call.files)
            await self._echo("MESSAGE_UPDATE", message)
        if message is not None:
            callback["response_message_id"] = message["id"]
            answer["resource"] = {"type": response_type, "message": copy.deepcopy(message)}
        return 200, answer

    def _interaction_for_webhook(self, call: _Call) -> FakeInteraction:
        application_id, token = int(call.params[0]), call.params[1]
        interaction = next((i for i in self._interactions.values() if i.token == token), None)
        if interaction is None or application_id != self.application_id:
            raise _ApiError(404, 10015, "Unknown Webhook")
        if interaction.response_type is None:
            raise _ApiError(404, 10015, "Unknown Webhook")
        if asyncio.get_running_loop().time() - interaction.created_at > self.interaction_token_s:
            raise _ApiError(404, 10015, "Unknown Webhook")  # the token's 15 minutes are over
        return interaction

    async def _post_followup(self, call: _Call) -> tuple[int, Any]:
        """Followup ``POST /webhooks/{app}/{token}`` (``?wait=1`` returns the message). After a
        deferred (type 5) response the first followup replaces the "thinking" message."""
        interaction = self._interaction_for_webhook(call)
        body: JSON = call.json or {}
        self._validate_message_body(body)
        self._require_content(body, has_files=bool(call.files))
        original = self._messages.get(interaction.original_message_id or 0)
        if original is not None and int(original["flags"]) & FLAG_LOADING:
            self._apply_edit(original, body, call.files)
            message = original
            await self._echo("MESSAGE_UPDATE", message)
        else:
            flags = int(body.get("flags") or 0)
            message = self._interaction_message(interaction, body, call.files, flags)
            interaction.followup_ids.append(int(message["id"]))
            await self._echo("MESSAGE_CREATE", message)
        if call.query.get("wait", "0").lower() in ("1", "true"):
            return 200, copy.deepcopy(message)
        return 204, None

    async def _webhook_message(self, call: _Call) -> tuple[int, Any]:
        interaction = self._interaction_for_webhook(call)
        target = call.params[2]
        if target == "@original":
            message_id = interaction.original_message_id
            if message_id is None and interaction.response_type in (6, 7):
                message_id = interaction.message_id
        else:
            message_id = int(target)
        message = self._messages.get(message_id or 0)
        if message is None:
            raise _ApiError(404, 10008, "Unknown Message")
        if call.method == "GET":
            return 200, copy.deepcopy(message)
        if call.method == "DELETE":
            await self._remove_message(message)
            return 204, None
        self._apply_edit(message, call.json or {}, call.files)
        await self._echo("MESSAGE_UPDATE", message)
        return 200, copy.deepcopy(message)

    # -- control routes (the fake as a process) -------------------------------------------------

    async def _handle_control(self, request: web.Request) -> web.Response:
        """``/_fake/...``: the helpers above over HTTP (see the module docstring)."""
        what = request.match_info["what"]
        body: JSON = await request.json() if request.can_read_body else {}
        try:
            if what == "user":
                user = self.add_user(str(body["name"]))
                answer: Any = {"id": str(user.id), "dm_channel_id": str(self.dm_channel_id(user))}
            elif what == "message":
                author = self._users[int(body["author_id"])]
                message = await self.dispatch_message(
                    int(body["channel_id"]), author, str(body["content"])
                )
                answer = copy.deepcopy(message)
            elif what == "gateway":
                answer = await self._control_gateway(body)
            elif what == "messages":
                answer = {"messages": self.messages_in(int(request.query["channel_id"]))}
            elif what == "state":
                answer = {
                    "identifies": len(self.identifies),
                    "resumes": len(self.resumes),
                    "connections": len(self.connections),
                    "refused": self.refused_gateway,
                }
            else:
                return web.json_response({"error": f"unknown control {what}"}, status=404)
        except (KeyError, ValueError, TypeError, RuntimeError) as exc:
            return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=400)
        return web.json_response(answer)

    async def _control_gateway(self, body: JSON) -> JSON:
        fault = body.get("fault")
        if fault == "refuse":
            self.refuse_gateway(times=int(body.get("times", 0)), for_s=float(body.get("for_s", 0)))
        elif fault == "drop":
            await self.drop()
        elif fault == "disconnect":
            await self.disconnect(code=int(body.get("code", 4000)))
        elif fault == "reconnect":
            await self.request_reconnect()
        elif fault == "invalidate":
            await self.invalidate_session(resumable=bool(body.get("resumable", False)))
        else:
            raise ValueError(f"unknown gateway fault {fault!r}")
        return {"fault": fault}


async def _serve(port: int, token: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with FakeDiscord(port=port, token=token) as fake:
        urls = {
            "base_url": fake.url,
            "api_base": fake.api_base,
            "gateway_url": fake.gateway_url,
            "token": fake.token,
            "guild_id": str(fake.guild_id),
            "channel_id": str(fake.channel_id),
            "pid": os.getpid(),
        }
        print(json.dumps(urls), flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Discord until SIGTERM.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", default="fake-bot-token")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.port, args.token))


if __name__ == "__main__":
    main()
