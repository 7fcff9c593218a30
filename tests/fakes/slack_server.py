"""A local fake of Slack for tests and benchmarks: Web API, file uploads, response_url, Socket Mode.

The real clients talk to it over real sockets on 127.0.0.1::

    async with running_fake_slack() as fake:
        client = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url)
        await client.chat_postMessage(channel="C1", markdown_text="**hi**")
        assert fake.messages("C1")[0]["markdown_text"] == "**hi**"

As a process (benchmarks): ``python -m tests.fakes.slack_server --port 0`` prints one JSON line
``{"base_url", "api_url", "pid"}`` and serves until SIGTERM; ``/_fake/...`` routes stand in for
the Python helpers there (push an envelope, read calls and messages, script a failure).

Routes:
    POST|GET /api/<method>        Web API; token from ``Authorization: Bearer`` or a ``token`` param
    POST /upload/<file_id>        upload target handed out by files.getUploadURLExternal
    POST /respond/<id>            response_url targets (``new_response_url()``)
    GET  /socket-mode?ticket=...  Socket Mode websocket; the URL comes from apps.connections.open
    POST /_fake/envelope          ``{type, payload, retry_attempt?, wait_ack?}`` -> envelope_id, ack
    POST /_fake/fail              ``fail_next()`` fields; POST /_fake/response_url -> ``{url}``
    GET  /_fake/calls?method=     recorded calls; GET /_fake/messages?channel= stored messages

Socket Mode: on connect the fake sends ``{"type": "hello", ...}`` and answers pings with pongs
carrying the same data (the SDK reads ``sdk-ping-pong:<t>`` back to judge staleness); acks
``{envelope_id, payload?}`` are recorded. The SDK treats ``{"type": "disconnect"}`` and a
server close alike: apps.connections.open again, then a new connection.

Socket Mode faults: ``disconnect_sockets(reason)`` (``refresh_requested``, ``warning``,
``too_many_websockets``, ``link_disabled``: Slack closes the socket itself after
``link_disabled``, as the fake does with ``close=True``); ``drop_sockets(abrupt=True)`` resets
the TCP connection with no close frame; ``push_then_drop`` sends an envelope and drops the
connection before an ack can come back; ``refuse_connections(n)`` fails the next ``n``
``apps.connections.open`` calls with HTTP 500 ``internal_error`` and ``refuse_sockets(n)``
the next ``n`` websocket handshakes with HTTP 503 (``refuse_sockets()``: all of them until
``accept_sockets()``); with ``redeliver_unacked = True`` a new
connection first receives, as new envelopes with ``retry_attempt`` + 1, every
``events_api`` envelope an earlier connection left unacknowledged (Slack redelivers them).

Redelivery, as Slack does it (https://docs.slack.dev/apis/events-api/#retries):
``deliver_event`` (HTTP) sends an event again after a non-2xx answer, no answer within 3 s or
a refused connection, with ``X-Slack-Retry-Num`` 1-3 and ``X-Slack-Retry-Reason``;
``deliver_socket_event`` (Socket Mode) sends a new envelope with ``retry_attempt`` 1-3 when
the last one was not acknowledged in time. The retry delays (about 0 s, 1 min, 5 min at Slack)
are compressed; ``deliveries[event_id]`` records each attempt's outcome.

Web API replies are ``{"ok": true, ...}`` or HTTP 200 ``{"ok": false, "error": "..."}``; only
``ratelimited`` is HTTP 429 with ``Retry-After`` (seconds, an integer). Wire shapes follow
docs.slack.dev and slack_sdk 3.48 (``web/async_client.py``, ``socket_mode/aiohttp``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import io
import itertools
import json
import math
import os
import re
import signal
import time
import uuid
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

from aiohttp import ClientSession, TCPConnector, WSCloseCode, WSMsgType, web
from aiohttp.web_request import FileField
from multidict import CIMultiDict

from tests.fakes.slack_files import SlackFileHost

JsonDict = dict[str, Any]
Signature = Literal["valid", "forged", "stale", "missing"]

SLACK_RETRY_DELAYS_S = (0.2, 0.5, 1.0)
"""Delays before Slack's three retries of an event (about 0 s, 1 min and 5 min in Slack;
https://docs.slack.dev/apis/events-api/#retries), compressed for tests."""
ACK_TIMEOUT_S = 3.0
"""Slack waits this long for an event's acknowledgement before it retries it."""

_JSON_PARAMS = (
    "blocks",
    "attachments",
    "files",
    "metadata",
    "loading_messages",
    "chunks",
    "view",
    "prompts",
)

STREAM_TIERS = {"chat.startStream": 20, "chat.appendStream": 100, "chat.stopStream": 20}
"""Calls a minute per workspace of the streaming methods: rate tiers 2 / 4 / 2
(docs.slack.dev/reference/methods/chat.startStream, chat.appendStream, chat.stopStream;
docs.slack.dev/apis/web-api/rate-limits: tier 2 about 20, tier 4 about 100 a minute)."""

_MENTION = re.compile(r"<([@!#][^<>\s]*)>")

MANIFEST = Path(__file__).resolve().parents[2] / "manifest.yml"
"""The app's manifest: the fake delivers only the events its ``bot_events`` subscribe to."""

EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
    "assistant_thread_started": "assistant:write",
}
"""The bot scope each event subscription needs (docs.slack.dev/reference/events/<event>,
"Required Scopes"; ``app_home_opened``, ``tokens_revoked`` and ``app_uninstalled`` need
none). Slack refuses a manifest that subscribes to an event without its scope."""
_CHANNEL_TYPES = {"C": "channel", "G": "group", "D": "im"}
_MESSAGE_EVENTS = {
    "channel": "message.channels",
    "group": "message.groups",
    "im": "message.im",
    "mpim": "message.mpim",
}


def manifest_list(name: str, manifest: Path = MANIFEST) -> list[str]:
    """The items of the YAML list under ``name:`` in ``manifest`` (``- item`` lines, comments
    dropped): the manifest is plain enough that no YAML parser is needed."""
    text = manifest.read_text(encoding="utf-8")
    block = text.split(f"{name}:\n", 1)[1]
    items = []
    for line in block.splitlines():
        stripped = line.split("#", 1)[0].strip()
        if not stripped:
            continue
        if not stripped.startswith("- "):
            break
        items.append(stripped[2:].strip())
    return items


def manifest_bot_events(manifest: Path = MANIFEST) -> frozenset[str]:
    """The manifest's ``settings.event_subscriptions.bot_events``; ``ValueError`` when one
    lacks its scope (:data:`EVENT_SCOPES`), as Slack refuses such a manifest."""
    events = frozenset(manifest_list("bot_events", manifest))
    scopes = set(manifest_list("bot", manifest))
    missing = sorted(
        f"{e} needs {EVENT_SCOPES[e]}"
        for e in events
        if e in EVENT_SCOPES and EVENT_SCOPES[e] not in scopes
    )
    if missing:
        raise ValueError(f"{manifest.name}: " + "; ".join(missing))
    return events


def subscription_of(event: Mapping[str, Any]) -> str:
    """The ``bot_events`` entry that makes Slack send ``event``: for a message, by its
    ``channel_type`` (``channel`` -> ``message.channels``, ``group`` -> ``message.groups``,
    ``im`` -> ``message.im``, ``mpim`` -> ``message.mpim``; docs.slack.dev, message.* events:
    "look for the event's channel_type"), else its ``type``."""
    kind = str(event.get("type") or "")
    if kind != "message":
        return kind
    channel_type = event.get("channel_type") or _CHANNEL_TYPES.get(
        str(event.get("channel") or "")[:1], "channel"
    )
    return _MESSAGE_EVENTS.get(str(channel_type), f"message.{channel_type}")


class Unsubscribed(Exception):
    """A test asked the fake to deliver an event the app does not subscribe to: Slack would
    never send it ("sent via the Events API to your app if it is subscribed",
    docs.slack.dev/reference/events/tokens_revoked)."""


def render_markdown_text(text: str) -> tuple[str, list[str]]:
    """What a person sees of ``markdown_text`` and the mentions in it that notify someone.

    As Slack documents for message text (docs.slack.dev/messaging/formatting-message-text):
    ``<`` ``>`` ``&`` are control characters; ``<@U123>``, ``<!here>``, ``<!channel>``,
    ``<!everyone>`` and ``<!subteam^S1>`` are mentions (shown as ``@U123``, ``@here``...,
    and they notify); the entities ``&lt;`` ``&gt;`` ``&amp;`` show as ``<`` ``>`` ``&`` and
    never form a mention.
    """
    pings = [m.group(1) for m in _MENTION.finditer(text) if m.group(1)[0] in "@!"]
    shown = _MENTION.sub(lambda m: "@" + m.group(1).lstrip("@!#").split("|")[0], text)
    shown = shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return shown, pings


MAX_MESSAGE_BLOCKS = 50
"""A message holds at most 50 blocks (docs.slack.dev/reference/block-kit/blocks)."""
MAX_MARKDOWN_BLOCK_CHARS = 12_000
"""All ``markdown`` blocks of one payload together: at most 12,000 characters
(docs.slack.dev/reference/block-kit/blocks/markdown-block)."""
MAX_FEEDBACK_TEXT_CHARS = 75
MAX_FEEDBACK_VALUE_CHARS = 2000
"""A feedback button's ``text`` and ``value`` limits (docs.slack.dev/reference/block-kit/
block-elements/feedback-buttons-element)."""


def _feedback_button(button: Any) -> bool:
    if not isinstance(button, dict):
        return False
    text, value = button.get("text"), button.get("value")
    label = button.get("accessibility_label", "")
    return (
        isinstance(text, dict)
        and text.get("type") == "plain_text"
        and 0 < len(str(text.get("text") or "")) <= MAX_FEEDBACK_TEXT_CHARS
        and isinstance(value, str)
        and 0 < len(value) <= MAX_FEEDBACK_VALUE_CHARS
        and isinstance(label, str)
        and len(label) <= MAX_FEEDBACK_TEXT_CHARS
    )


MAX_BUTTON_TEXT_CHARS = 75
MAX_BUTTON_VALUE_CHARS = 2000
MAX_ACTION_ID_CHARS = 255
"""A ``button`` element: ``plain_text`` text of at most 75 characters, ``value`` at most 2,000,
``action_id`` at most 255 (docs.slack.dev/reference/block-kit/block-elements/button-element)."""
MAX_HEADER_CHARS = 150
"""A ``header`` block's ``plain_text``: at most 150 characters
(docs.slack.dev/reference/block-kit/blocks/header-block)."""


def _button(element: Any) -> bool:
    """Whether ``element`` is no button, or a button within its limits."""
    if not isinstance(element, dict) or element.get("type") != "button":
        return True
    text = element.get("text")
    return (
        isinstance(text, dict)
        and text.get("type") == "plain_text"
        and 0 < len(str(text.get("text") or "")) <= MAX_BUTTON_TEXT_CHARS
        and len(str(element.get("value") or "")) <= MAX_BUTTON_VALUE_CHARS
        and len(str(element.get("action_id") or "")) <= MAX_ACTION_ID_CHARS
    )


def _context_action(element: Any) -> bool:
    if not isinstance(element, dict):
        return False
    if element.get("type") == "icon_button":
        return True
    return (
        element.get("type") == "feedback_buttons"
        and 0 < len(str(element.get("action_id") or "")) <= 255
        and _feedback_button(element.get("positive_button"))
        and _feedback_button(element.get("negative_button"))
    )


def check_message_blocks(blocks: Any, *, max_blocks: int = MAX_MESSAGE_BLOCKS) -> None:
    """Refuse message ``blocks`` as Slack does (``invalid_blocks``; ``msg_blocks_too_long``
    past the markdown blocks' 12,000 characters): at most ``max_blocks`` (50 in a message,
    100 in a Home view); a ``markdown`` block has non-empty ``text``; a ``section``'s text at
    most 3,000 characters; a ``header``'s at most 150; a button (in an ``actions`` block or a
    section's ``accessory``) within :func:`_button`'s limits; a
    ``context_actions`` block holds 1-5 ``feedback_buttons`` / ``icon_button`` elements, a
    feedback button a ``plain_text`` text of at most 75 characters and a value of at most
    2,000 (docs.slack.dev block and element references; slack_sdk 3.48 ``MarkdownBlock``,
    ``ContextActionsBlock``, ``FeedbackButtonObject``). Other block types are not checked."""
    if not isinstance(blocks, list) or not 0 < len(blocks) <= max_blocks:
        raise _ApiError("invalid_blocks")
    markdown_chars = 0
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            raise _ApiError("invalid_blocks")
        if kind == "markdown":
            text = block.get("text")
            if not isinstance(text, str) or not text:
                raise _ApiError("invalid_blocks")
            markdown_chars += len(text)
        elif kind == "section":
            text = (block.get("text") or {}).get("text", "")
            if len(str(text)) > 3000 or not _button(block.get("accessory")):
                raise _ApiError("invalid_blocks")
        elif kind == "header":
            text = (block.get("text") or {}).get("text", "")
            if not 0 < len(str(text)) <= MAX_HEADER_CHARS:
                raise _ApiError("invalid_blocks")
        elif kind == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not all(_button(e) for e in elements):
                raise _ApiError("invalid_blocks")
        elif kind == "context_actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 0 < len(elements) <= 5:
                raise _ApiError("invalid_blocks")
            if not all(_context_action(e) for e in elements):
                raise _ApiError("invalid_blocks")
    if markdown_chars > MAX_MARKDOWN_BLOCK_CHARS:
        raise _ApiError("msg_blocks_too_long")


def shown_markdown(message: JsonDict) -> str:
    """The Markdown a message shows: its ``markdown_text``, else its ``markdown`` blocks
    joined, else its ``text``."""
    if message.get("markdown_text") is not None:
        return str(message["markdown_text"])
    parts = [
        str(b.get("text") or "")
        for b in message.get("blocks") or []
        if isinstance(b, dict) and b.get("type") == "markdown"
    ]
    return "\n".join(parts) if parts else str(message.get("text") or "")


MAX_VIEW_BLOCKS = 100
"""A Home tab view holds at most 100 blocks (docs.slack.dev, "Home tab views")."""
MAX_PRIVATE_METADATA_CHARS = 3000
MAX_CALLBACK_ID_CHARS = 255
MAX_LOADING_MESSAGES = 10
"""``assistant.threads.setStatus`` ``loading_messages``: "Maximum of 10 messages"
(docs.slack.dev/reference/methods/assistant.threads.setStatus)."""
MAX_LOADING_MESSAGE_CHARS = 50
"""Each loading message: 1-50 characters (the limit PLATFORMS.md records from the method's
argument schema; the docs page states only the count)."""
MAX_SUGGESTED_PROMPTS = 4
"""assistant.threads.setSuggestedPrompts takes at most four prompts (docs.slack.dev)."""
_APP_TOKEN_METHODS = frozenset({"apps.connections.open"})


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is, as auth.test reports it (Bolt's self-event filter uses user_id/bot_id)."""

    user_id: str = "U0BOT"
    bot_id: str = "B0BOT"
    app_id: str = "A0SELFMIND"
    team_id: str = "T0SELFMIND"
    team: str = "SelfMind Test"
    user: str = "selfmind"
    url: str = "https://selfmind-test.slack.com/"
    enterprise_id: str | None = None
    """An Enterprise Grid org's id (``E...``); None: a workspace outside Grid."""
    org_install: bool = False
    """Installed org-wide on Grid (``is_enterprise_install``)."""

    @property
    def mention(self) -> str:
        """``<@U...>``, how the bot appears inside message text."""
        return f"<@{self.user_id}>"


@dataclass
class RecordedCall:
    """One Web API call: merged query/form/JSON params (JSON strings decoded), headers, reply."""

    method: str
    params: JsonDict
    headers: CIMultiDict[str]
    status: int
    response: JsonDict
    at: float = field(default_factory=time.monotonic)

    @property
    def ok(self) -> bool:
        return bool(self.response.get("ok"))


@dataclass
class UploadedFile:
    """A file from files.getUploadURLExternal / POST upload_url / files.completeUploadExternal."""

    id: str
    filename: str
    length: int
    alt_txt: str | None = None
    snippet_type: str | None = None
    title: str | None = None
    content: bytes | None = None
    channels: list[str] = field(default_factory=list)
    initial_comment: str | None = None
    thread_ts: str | None = None
    completed: bool = False


@dataclass(frozen=True)
class InboundResponse:
    """What the app answered to an inbound HTTP request, and what was sent (``sent``)."""

    status: int
    text: str
    headers: Mapping[str, str]
    sent: JsonDict

    def json(self) -> Any:
        return json.loads(self.text)


@dataclass
class _Fault:
    error: str
    status: int
    retry_after: int | None


class _ApiError(Exception):
    def __init__(self, error: str, *, status: int = 200, retry_after: int | None = None) -> None:
        super().__init__(error)
        self.error, self.status, self.retry_after = error, status, retry_after


def sign(body: bytes, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """Slack's request signature headers for ``body``.

    ``X-Slack-Signature: v0=<hex HMAC-SHA256(secret, "v0:{timestamp}:{body}")>`` and
    ``X-Slack-Request-Timestamp`` (epoch seconds, now by default). Source: docs.slack.dev,
    "Verifying requests from Slack"; apps refuse timestamps older than 300 s.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    base = b"v0:" + str(ts).encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Signature": f"v0={digest}", "X-Slack-Request-Timestamp": str(ts)}


def _ts_key(ts: str) -> tuple[int, int]:
    whole, _, frac = ts.partition(".")
    return int(whole), int(frac or 0)


class SlackEvents:
    """Builders of the payloads Slack sends to apps: events, slash commands, block actions.

    Usable without a server; ``FakeSlack.events`` shares the fake's identity, ts clock and
    response URLs. Shapes follow docs.slack.dev (Events API types, slash commands, block_actions).
    """

    def __init__(
        self,
        identity: BotIdentity | None = None,
        *,
        response_url: Callable[[], str] | None = None,
    ) -> None:
        self.identity = identity or BotIdentity()
        self._response_url = response_url or (lambda: "https://hooks.slack.com/commands/T/1/x")
        self._last_us = 0
        self._ids = itertools.count(1)

    def next_ts(self) -> str:
        """A message ts ``"<epoch seconds>.<6 digits>"``, unique and increasing."""
        self._last_us = max(int(time.time() * 1_000_000), self._last_us + 1)
        return f"{self._last_us // 1_000_000}.{self._last_us % 1_000_000:06d}"

    def dm_channel(self, user: str) -> str:
        """The IM channel id conversations.open returns for ``user`` (``U123`` -> ``D123``)."""
        return "D" + (user[1:] if user[:1] in ("U", "W") else user)

    def message(
        self,
        text: str,
        *,
        user: str = "U0USER",
        channel: str | None = None,
        channel_type: str = "im",
        thread_ts: str | None = None,
        ts: str | None = None,
        **extra: Any,
    ) -> JsonDict:
        """A user's ``message`` event; a DM (``message.im``) unless ``channel_type`` is given."""
        ts = ts or self.next_ts()
        event: JsonDict = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel": channel or (self.dm_channel(user) if channel_type == "im" else "C0GENERAL"),
            "channel_type": channel_type,
            "team": self.identity.team_id,
            "client_msg_id": str(uuid.uuid4()),
        }
        if thread_ts:
            event |= {"thread_ts": thread_ts, "parent_user_id": extra.pop("parent_user_id", user)}
        return event | extra

    def channel_message(self, text: str, *, channel: str = "C0GENERAL", **kw: Any) -> JsonDict:
        """A ``message.channels`` event."""
        return self.message(text, channel=channel, channel_type="channel", **kw)

    def group_dm_message(self, text: str, *, channel: str = "G0GROUPDM", **kw: Any) -> JsonDict:
        """A ``message.mpim`` event: a group DM (a multi-person DM, ``G...`` id, channel_type
        ``mpim``; docs.slack.dev/reference/events/message.mpim)."""
        return self.message(text, channel=channel, channel_type="mpim", **kw)

    def thread_broadcast(
        self, text: str, *, thread_ts: str, channel: str = "C0GENERAL", **kw: Any
    ) -> JsonDict:
        """A thread reply also sent to the channel ("Also send to #channel"): ``message``
        subtype ``thread_broadcast``, with ``thread_ts`` and the thread's ``root``
        (docs.slack.dev/reference/events/message/thread_broadcast)."""
        event = self.channel_message(text, channel=channel, thread_ts=thread_ts, **kw)
        root = {"type": "message", "ts": thread_ts, "thread_ts": thread_ts}
        return event | {"subtype": "thread_broadcast", "root": root}

    def app_mention(
        self,
        text: str,
        *,
        user: str = "U0USER",
        channel: str = "C0GENERAL",
        thread_ts: str | None = None,
        ts: str | None = None,
    ) -> JsonDict:
        """An ``app_mention`` event; put ``identity.mention`` in ``text`` as Slack does."""
        event = self.channel_message(text, user=user, channel=channel, thread_ts=thread_ts, ts=ts)
        event["type"] = "app_mention"
        del event["channel_type"]
        return event

    def bot_message(
        self, text: str, *, bot_id: str | None = None, channel: str = "C0GENERAL", **kw: Any
    ) -> JsonDict:
        """A message from a bot (our own unless ``bot_id`` names another)."""
        own = bot_id is None or bot_id == self.identity.bot_id
        user = self.identity.user_id if own else "U0OTHERBOT"
        event = self.message(text, user=user, channel=channel, channel_type="channel", **kw)
        event.pop("client_msg_id")
        return event | {"bot_id": bot_id or self.identity.bot_id, "app_id": self.identity.app_id}

    def message_changed(self, original: JsonDict, new_text: str) -> JsonDict:
        """``message`` subtype ``message_changed`` for an earlier message event."""
        ts = self.next_ts()
        edited = original | {"text": new_text, "edited": {"user": original.get("user"), "ts": ts}}
        return {
            "type": "message",
            "subtype": "message_changed",
            "hidden": True,
            "channel": original["channel"],
            "channel_type": original.get("channel_type", "channel"),
            "message": edited,
            "previous_message": original,
            "ts": ts,
            "event_ts": ts,
        }

    def message_deleted(self, original: JsonDict) -> JsonDict:
        """``message`` subtype ``message_deleted`` for an earlier message event."""
        ts = self.next_ts()
        return {
            "type": "message",
            "subtype": "message_deleted",
            "hidden": True,
            "channel": original["channel"],
            "channel_type": original.get("channel_type", "channel"),
            "deleted_ts": original["ts"],
            "previous_message": original,
            "ts": ts,
            "event_ts": ts,
        }

    def channel_join(self, *, user: str = "U0USER", channel: str = "C0GENERAL") -> JsonDict:
        """``message`` subtype ``channel_join``."""
        text = f"<@{user}> has joined the channel"
        event = self.channel_message(text, user=user, channel=channel)
        event.pop("client_msg_id")
        return event | {"subtype": "channel_join"}

    def event_callback(self, event: JsonDict, *, event_id: str | None = None) -> JsonDict:
        """The Events API envelope around ``event`` (HTTP body / Socket Mode events_api payload)."""
        return {
            "token": "fake-verification-token",
            "team_id": self.identity.team_id,
            "api_app_id": self.identity.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._ids):08d}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": self.identity.enterprise_id,
                    "team_id": self.identity.team_id,
                    "user_id": self.identity.user_id,
                    "is_bot": True,
                    "is_enterprise_install": self.identity.org_install,
                }
            ],
            "is_ext_shared_channel": False,
        } | ({"enterprise_id": self.identity.enterprise_id} if self.identity.enterprise_id else {})

    def tokens_revoked(self, *, bot: bool = True) -> JsonDict:
        """``tokens_revoked``: ``tokens.bot`` lists the bot user (when ``bot``), ``tokens.oauth``
        a user token's user (docs.slack.dev, events/tokens_revoked)."""
        bots = [self.identity.user_id] if bot else []
        return {"type": "tokens_revoked", "tokens": {"oauth": ["U0USER"], "bot": bots}}

    def app_uninstalled(self) -> JsonDict:
        """``app_uninstalled``: the app was removed from the workspace."""
        return {"type": "app_uninstalled"}

    def app_home_opened(self, *, user: str = "U0USER", tab: str = "home") -> JsonDict:
        """``app_home_opened``: ``tab`` is ``home`` or ``messages`` (the DM); ``channel`` the
        user's DM with the app."""
        return {
            "type": "app_home_opened",
            "user": user,
            "channel": self.dm_channel(user),
            "tab": tab,
            "event_ts": self.next_ts(),
        }

    def assistant_thread_started(self, *, user: str = "U0USER") -> JsonDict:
        """``assistant_thread_started``: a new thread in the assistant view."""
        channel = self.dm_channel(user)
        return {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": user,
                "context": {},
                "channel_id": channel,
                "thread_ts": self.next_ts(),
            },
            "event_ts": self.next_ts(),
        }

    def view_action(
        self,
        view: JsonDict,
        action_id: str,
        value: str = "",
        *,
        user: str = "U0USER",
        user_team: str | None = None,
        action_type: str = "button",
    ) -> JsonDict:
        """A ``block_actions`` payload for a click in a published Home ``view`` (as the fake
        stored it: with its ``id``, ``hash`` and ``private_metadata``); no response_url,
        as for every view."""
        action: JsonDict = {
            "action_id": action_id,
            "block_id": "b1",
            "type": action_type,
            "action_ts": self.next_ts(),
        }
        action["value"] = value
        return {
            "type": "block_actions",
            "user": {
                "id": user,
                "username": "tester",
                "team_id": user_team or self.identity.team_id,
            },
            "api_app_id": self.identity.app_id,
            "token": "fake-verification-token",
            "container": {"type": "view", "view_id": view.get("id", "V0")},
            "trigger_id": f"{next(self._ids)}.{int(time.time())}.fake",
            "team": {"id": self.identity.team_id, "domain": "selfmind-test"},
            "is_enterprise_install": False,
            "view": view,
            "actions": [action],
        }

    def slash_command(
        self,
        command: str,
        text: str = "",
        *,
        user: str = "U0USER",
        user_name: str = "tester",
        channel: str = "C0GENERAL",
        channel_name: str = "general",
        response_url: str | None = None,
        team_id: str | None = None,
    ) -> dict[str, str]:
        """Slash command fields (form-encoded over HTTP, the payload in Socket Mode);
        ``team_id``: another team's (an external Slack Connect user's), default the app's."""
        return {
            "token": "fake-verification-token",
            "team_id": team_id or self.identity.team_id,
            "team_domain": "selfmind-test",
            "channel_id": channel,
            "channel_name": channel_name,
            "user_id": user,
            "user_name": user_name,
            "command": command,
            "text": text,
            "api_app_id": self.identity.app_id,
            "is_enterprise_install": "false",
            "response_url": response_url or self._response_url(),
            "trigger_id": f"{next(self._ids)}.{int(time.time())}.fake",
        }

    def block_actions(
        self,
        action_id: str,
        value: str = "",
        *,
        block_id: str = "b1",
        user: str = "U0USER",
        channel: str = "C0GENERAL",
        message_ts: str | None = None,
        response_url: str | None = None,
        user_team: str | None = None,
    ) -> JsonDict:
        """A ``block_actions`` interaction payload for a button click; ``user_team``: the
        clicker's own team (an external Slack Connect user's), default the app's."""
        ts = message_ts or self.next_ts()
        return {
            "type": "block_actions",
            "user": {
                "id": user,
                "username": "tester",
                "team_id": user_team or self.identity.team_id,
            },
            "api_app_id": self.identity.app_id,
            "token": "fake-verification-token",
            "container": {"type": "message", "message_ts": ts, "channel_id": channel},
            "trigger_id": f"{next(self._ids)}.{int(time.time())}.fake",
            "team": {"id": self.identity.team_id, "domain": "selfmind-test"},
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": channel.lower()},
            "message": {"type": "message", "ts": ts, "user": self.identity.user_id, "text": ""},
            "response_url": response_url or self._response_url(),
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block_id,
                    "value": value,
                    "type": "button",
                    "text": {"type": "plain_text", "text": action_id},
                    "action_ts": self.next_ts(),
                }
            ],
        }


class FakeSlack:
    """The fake Slack server. ``await start()``/``stop()`` or ``async with``; see the module doc.

    Limits: ``update_max_chars`` (chat.update text or markdown_text, default 4,000: Slack refuses
    edits of long messages with ``msg_too_long`` far below its documented 40,000),
    ``post_max_chars`` (40,000) and ``markdown_max_chars`` (12,000; docs.slack.dev,
    chat.postMessage).
    ``rate_limits`` maps a method to calls per ``rate_window_s`` per team (off by default; Slack's
    tier 3, e.g. chat.update, is about 50 a minute). ``agent_app``: the app uses the Agent
    messaging experience (manifest ``agent_view``), so suggested prompts sent with a
    ``thread_ts`` are silently dropped, as Slack does; False: the legacy ``assistant_view``.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bot_token: str = "xoxb-fake-bot-token",
        app_token: str = "xapp-fake-app-token",
        signing_secret: str = "fake-signing-secret",
        identity: BotIdentity | None = None,
        update_max_chars: int = 4_000,
        post_max_chars: int = 40_000,
        markdown_max_chars: int = 12_000,
        rate_limits: Mapping[str, int] | None = None,
        rate_window_s: float = 60.0,
        streaming_refusal: str | None = None,
        agent_app: bool = True,
        stream_lifetime_s: float = 300.0,
        bot_events: Iterable[str] | None = None,
    ) -> None:
        self.host, self._port = host, port
        self.bot_events: set[str] = set(manifest_bot_events() if bot_events is None else bot_events)
        """The events Slack sends the app (default: manifest.yml's ``bot_events``); a test of
        a legacy or hypothetical app may add to it. Delivering any other raises
        :class:`Unsubscribed`."""
        self.bot_token, self.app_token, self.signing_secret = bot_token, app_token, signing_secret
        self.identity = identity or BotIdentity()
        self.update_max_chars = update_max_chars
        self.post_max_chars = post_max_chars
        self.markdown_max_chars = markdown_max_chars
        self.rate_limits = STREAM_TIERS | dict(rate_limits or {})
        self.rate_window_s = rate_window_s
        self.streaming_refusal = streaming_refusal
        """Set to an error code (``"unknown_method"``: a workspace without the streaming
        methods; ``"channel_type_not_supported"``...) to refuse every streaming call from now
        on, also in the middle of a stream."""
        self.stream_lifetime_s = stream_lifetime_s
        """A stream not stopped within this long (seconds of ``clock``) is ended by Slack
        itself: appendStream and stopStream then fail with ``message_not_in_streaming_state``
        and the message is a "broken pill" (``broken_pill: True``: Slack shows it with an
        error) until a chat.update replaces it (python-slack-sdk#1859, PR #1880: about 5
        minutes). Before that a live stream cannot be changed by chat.update
        (``cant_update_message``): Slack documents no edit of a live stream, so the fake
        refuses it and the bot must stop it first. ``expire_streams()`` ends them now."""
        self.clock: Callable[[], float] = time.monotonic
        """The time streams age by (seconds); a test may replace it."""
        self._stream_started: dict[str, float] = {}
        self.events = SlackEvents(self.identity, response_url=self.new_response_url)

        self.recorded: list[RecordedCall] = []
        self.ephemerals: list[JsonDict] = []
        self.statuses: list[JsonDict] = []
        self.shown_status: dict[tuple[str, str], str] = {}
        """The status each (channel, thread_ts) shows now: set by a non-empty
        ``assistant.threads.setStatus``, gone on an empty one or when the app replies in that
        thread (a post or a stream; the method's docs: "automatically cleared when the app
        sends a reply")."""
        self.prompts: list[JsonDict] = []
        """Suggested prompts Slack applied (a call an agent app makes with thread_ts is not)."""
        self.agent_app = agent_app
        self.home_views: dict[str, JsonDict] = {}
        """The Home tab each user sees now (the last ``views.publish`` for their user_id)."""
        self.files: dict[str, UploadedFile] = {}
        self.file_host = SlackFileHost(team=self.identity.team_id, bot_token=bot_token)
        """Files users share (``url_private`` downloads): :mod:`tests.fakes.slack_files`."""
        self.envelopes: list[JsonDict] = []
        self.acks: list[JsonDict] = []
        self.deliveries: dict[str, list[int]] = defaultdict(list)
        self.socket_connections = 0
        self.channel_names: dict[str, str] = {}
        self.private_channels: set[str] = set()
        """``C...`` channels conversations.info calls private (``is_private``)."""
        self.group_dms: set[str] = {"G0GROUPDM"}
        """Channels conversations.info calls group DMs (``is_mpim``)."""
        self._history: dict[str, list[JsonDict]] = defaultdict(list)
        self._responses: dict[str, list[JsonDict]] = {}
        self._faults: dict[str, deque[_Fault]] = defaultdict(deque)
        self.revoked_tokens: dict[str, str] = {}
        """Bot tokens Slack no longer takes, each with its Web API error (``revoke_bot_token``)."""
        self._rate_hits: dict[tuple[str, str], deque[float]] = defaultdict(deque)
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._socket_requests: dict[int, web.Request] = {}
        self._refuse_sockets: float = 0  # math.inf: until accept_sockets()
        self.sockets_refused = 0
        """Websocket handshakes the fake refused (``refuse_sockets``)."""
        self._unacked: dict[str, tuple[JsonDict, int]] = {}
        self.redeliver_unacked = False
        self.redelivered: list[JsonDict] = []
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self._methods: dict[str, Callable[[JsonDict], JsonDict]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.delete": self._chat_delete,
            "chat.startStream": self._chat_start_stream,
            "chat.appendStream": self._chat_append_stream,
            "chat.stopStream": self._chat_stop_stream,
            "conversations.replies": self._conversations_replies,
            "conversations.history": self._conversations_history,
            "conversations.open": self._conversations_open,
            "conversations.info": self._conversations_info,
            "assistant.threads.setStatus": self._assistant_set_status,
            "assistant.threads.setSuggestedPrompts": self._assistant_set_prompts,
            "views.publish": self._views_publish,
            "apps.connections.open": self._apps_connections_open,
            "files.getUploadURLExternal": self._files_get_upload_url,
            "files.completeUploadExternal": self._files_complete_upload,
        }

    # ---- lifecycle and URLs -------------------------------------------------------------

    async def start(self) -> None:
        """Listen on ``host:port`` (port 0: an ephemeral one; read ``port`` afterwards)."""
        app = web.Application()
        app.add_routes(
            [
                web.route("*", "/api/{method}", self._handle_api),
                web.post("/upload/{file_id}", self._handle_upload),
                web.post("/respond/{response_id}", self._handle_respond),
                web.get("/socket-mode", self._handle_socket),
                web.post("/_fake/envelope", self._control_envelope),
                web.post("/_fake/fail", self._control_fail),
                web.post("/_fake/response_url", self._control_response_url),
                web.get("/_fake/calls", self._control_calls),
                web.get("/_fake/messages", self._control_messages),
                *self.file_host.routes(),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self._port).start()
        self._port = self._runner.addresses[0][1]
        self.file_host.base_url = self.base_url
        # No cap on connections (aiohttp's default is 100): Slack delivers a burst at once.
        self._session = ClientSession(connector=TCPConnector(limit=0))

    async def stop(self) -> None:
        """Close Socket Mode connections, the outbound session and the listener."""
        for ws in list(self._sockets):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def api_url(self) -> str:
        """``AsyncWebClient(base_url=...)``; ends with ``/api/``."""
        return f"{self.base_url}/api/"

    def new_response_url(self) -> str:
        """A fresh ``http://127.0.0.1:PORT/respond/<id>``; POSTs to it land in ``responses()``."""
        response_id = f"R{next(self._ids):06d}"
        self._responses[response_id] = []
        return f"{self.base_url}/respond/{response_id}"

    # ---- recording and state ------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[RecordedCall]:
        """Recorded Web API calls, oldest first, optionally of one method."""
        return [c for c in self.recorded if method is None or c.method == method]

    def messages(self, channel: str) -> list[JsonDict]:
        """A channel's stored messages (roots and replies) in ts order (streams past their
        lifetime shown ended: ``_live_stream``)."""
        history = self._history.get(channel, [])
        for m in history:
            self._live_stream(m)
        return list(history)

    def thread(self, channel: str, thread_ts: str) -> list[JsonDict]:
        """Root and replies of a thread, in order, as conversations.replies returns them."""
        return [
            m
            for m in self.messages(channel)
            if m["ts"] == thread_ts or m.get("thread_ts") == thread_ts
        ]

    def responses(self, response_url: str) -> list[JsonDict]:
        """JSON bodies POSTed to a response_url (given as the URL or its id)."""
        return list(self._responses.get(response_url.rstrip("/").rsplit("/", 1)[-1], []))

    def seed_message(
        self, channel: str, text: str, *, user: str = "U0USER", **fields: Any
    ) -> JsonDict:
        """Store a message as if posted earlier (``ts``, ``thread_ts``, ``bot_id``... in fields)."""
        msg = {"type": "message", "user": user, "text": text, "ts": self.events.next_ts()}
        return self._store(channel, msg | fields)

    def fail_next(
        self,
        method: str,
        *,
        error: str = "ratelimited",
        status: int | None = None,
        retry_after: int | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail with ``error``.

        ``ratelimited`` defaults to HTTP 429 with ``Retry-After: 1``; other errors to HTTP 200.
        """
        status = status or (429 if error == "ratelimited" else 200)
        if status == 429 and retry_after is None:
            retry_after = 1
        self._faults[method].extend(_Fault(error, status, retry_after) for _ in range(times))

    async def wait_until(
        self, predicate: Callable[[], bool], *, timeout_s: float = 5.0, what: str = "condition"
    ) -> None:
        """Wait until ``predicate()`` holds; re-checked after every call, response and ack."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout_s)
            except TimeoutError:
                raise TimeoutError(f"fake Slack: no {what} within {timeout_s} s") from None

    async def wait_for_call(
        self, method: str, *, count: int = 1, timeout_s: float = 5.0
    ) -> RecordedCall:
        """Wait until ``method`` has been called ``count`` times; return the ``count``-th call."""
        await self.wait_until(
            lambda: len(self.calls(method)) >= count, timeout_s=timeout_s, what=f"{count}x {method}"
        )
        return self.calls(method)[count - 1]

    async def wait_for_response(self, response_url: str, *, timeout_s: float = 5.0) -> JsonDict:
        """Wait for the first POST to ``response_url``; return its JSON body."""
        await self.wait_until(
            lambda: bool(self.responses(response_url)),
            timeout_s=timeout_s,
            what="response_url POST",
        )
        return self.responses(response_url)[0]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _store(self, channel: str, msg: JsonDict) -> JsonDict:
        history = self._history[channel]
        if any(m["ts"] == msg["ts"] for m in history):
            return msg
        history.append(msg)
        history.sort(key=lambda m: _ts_key(m["ts"]))
        root_ts = msg.get("thread_ts")
        root = self._find(channel, root_ts) if root_ts and root_ts != msg["ts"] else None
        if root is not None:
            root["thread_ts"] = root["ts"]
            root["reply_count"] = root.get("reply_count", 0) + 1
            root["latest_reply"] = msg["ts"]
        return msg

    def _find(self, channel: str, ts: str | None) -> JsonDict | None:
        return next((m for m in self._history.get(channel, []) if m["ts"] == ts), None)

    def _observe_event(self, event: JsonDict) -> None:
        """Keep the history in step with events delivered to the app, as Slack's would be."""
        channel, subtype = event.get("channel"), event.get("subtype")
        if not channel or event.get("type") not in ("message", "app_mention"):
            return
        if not re.fullmatch(r"\d+\.\d+", str(event.get("ts", "0.0"))):
            return  # a hostile test's ts ("nan"): not a message Slack would keep
        if subtype == "message_changed":
            stored = self._find(channel, event["message"]["ts"])
            if stored is not None:
                stored["text"] = event["message"]["text"]
        elif subtype == "message_deleted":
            self._history[channel] = [
                m for m in self._history[channel] if m["ts"] != event["deleted_ts"]
            ]
        elif subtype in (None, "bot_message", "thread_broadcast", "file_share"):
            keep = ("type", "user", "text", "ts", "thread_ts", "bot_id", "app_id", "parent_user_id")
            self._store(channel, {"type": "message"} | {k: event[k] for k in keep if k in event})

    # ---- Web API ------------------------------------------------------------------------

    async def _handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params, token = await self._read_params(request)
        headers: dict[str, str] = {}
        body: JsonDict
        try:
            self._check_auth(method, token)
            self._check_faults(method, params)
            handler = self._methods.get(method)
            if handler is None:
                raise _ApiError("unknown_method")
            status, body = 200, {"ok": True} | handler(params)
        except _ApiError as e:
            status, body = e.status, {"ok": False, "error": e.error}
            if e.retry_after is not None:
                headers["Retry-After"] = str(e.retry_after)
        self.recorded.append(
            RecordedCall(method, params, CIMultiDict(request.headers), status, body)
        )
        await self._notify()
        return web.json_response(body, status=status, headers=headers)

    async def _read_params(self, request: web.Request) -> tuple[JsonDict, str | None]:
        params: JsonDict = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            params |= body if isinstance(body, dict) else {}
        elif request.can_read_body:
            params |= {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        for key in _JSON_PARAMS:
            if isinstance(params.get(key), str):
                with contextlib.suppress(ValueError):
                    params[key] = json.loads(params[key])
        token = params.pop("token", None)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            token = auth.removeprefix("Bearer ").strip()
        return params, token

    def _check_auth(self, method: str, token: str | None) -> None:
        if not token:
            raise _ApiError("not_authed")
        if token in self.revoked_tokens:
            raise _ApiError(self.revoked_tokens[token])
        expected = self.app_token if method in _APP_TOKEN_METHODS else self.bot_token
        if token != expected:
            known = token in (self.app_token, self.bot_token)
            raise _ApiError("not_allowed_token_type" if known else "invalid_auth")

    def _check_faults(self, method: str, params: JsonDict) -> None:
        faults = self._faults.get(method)
        if faults:
            fault = faults.popleft()
            raise _ApiError(fault.error, status=fault.status, retry_after=fault.retry_after)
        limit = self.rate_limits.get(method)
        if limit is None:
            return
        hits = self._rate_hits[(method, str(params.get("team_id") or self.identity.team_id))]
        now = time.monotonic()
        while hits and now - hits[0] >= self.rate_window_s:
            hits.popleft()
        if len(hits) >= limit:
            wait_s = max(1, math.ceil(self.rate_window_s - (now - hits[0])))
            raise _ApiError("ratelimited", status=429, retry_after=wait_s)
        hits.append(now)

    @staticmethod
    def _required(params: JsonDict, key: str, error: str = "invalid_arguments") -> str:
        value = params.get(key)
        if value is None or value == "":
            raise _ApiError(error)
        return str(value)

    def _content(self, params: JsonDict, *, max_chars: int) -> JsonDict:
        """Validate and pick the message content fields (text, markdown_text, blocks...)."""
        markdown = params.get("markdown_text")
        if markdown is not None and ("text" in params or "blocks" in params):
            raise _ApiError("markdown_text_conflict")
        if not any(params.get(k) for k in ("text", "markdown_text", "blocks", "attachments")):
            raise _ApiError("no_text")
        if markdown is not None and len(markdown) > min(max_chars, self.markdown_max_chars):
            raise _ApiError("msg_too_long")
        if len(params.get("text") or "") > max_chars:
            raise _ApiError("msg_too_long")
        if "blocks" in params:
            check_message_blocks(params["blocks"])
        content: JsonDict = {
            k: params[k] for k in ("text", "blocks", "attachments", "metadata") if k in params
        }
        if markdown is not None:
            content |= {"text": markdown, "markdown_text": markdown}
        return content

    def _bot_message(self, content: JsonDict) -> JsonDict:
        ident = self.identity
        return {
            "type": "message",
            "user": ident.user_id,
            "bot_id": ident.bot_id,
            "app_id": ident.app_id,
            "team": ident.team_id,
            "ts": self.events.next_ts(),
        } | content

    def _auth_test(self, params: JsonDict) -> JsonDict:
        i = self.identity
        return {
            "url": i.url,
            "team": i.team,
            "user": i.user,
            "team_id": i.team_id,
            "user_id": i.user_id,
            "bot_id": i.bot_id,
            "is_enterprise_install": i.org_install,
        } | ({"enterprise_id": i.enterprise_id} if i.enterprise_id else {})

    def _chat_post_message(self, params: JsonDict) -> JsonDict:
        channel = self._required(params, "channel", "channel_not_found")
        msg = self._bot_message(self._content(params, max_chars=self.post_max_chars))
        if params.get("thread_ts"):
            msg["thread_ts"] = str(params["thread_ts"])
            self.shown_status.pop((channel, msg["thread_ts"]), None)  # a reply clears it
        self._store(channel, msg)
        return {"channel": channel, "ts": msg["ts"], "message": msg}

    def _own_message(self, params: JsonDict, *, denied: str) -> tuple[str, JsonDict]:
        channel = self._required(params, "channel", "channel_not_found")
        msg = self._find(channel, self._required(params, "ts", "message_not_found"))
        if msg is None:
            raise _ApiError("message_not_found")
        if msg.get("user") != self.identity.user_id:
            raise _ApiError(denied)
        return channel, msg

    def _live_stream(self, msg: JsonDict) -> bool:
        """Whether ``msg`` is a stream still open; one past ``stream_lifetime_s`` is ended
        here, as Slack ends it: no longer streaming, and a broken pill."""
        if not msg.get("streaming"):
            return False
        now = self.clock()
        started = self._stream_started.get(str(msg["ts"]), now)
        if now - started >= self.stream_lifetime_s:
            msg["streaming"] = False
            msg["broken_pill"] = True
            return False
        return True

    def expire_streams(self) -> list[str]:
        """End every live stream now, as Slack does after ``stream_lifetime_s``; returns
        their ``ts``."""
        ended = []
        for history in self._history.values():
            for msg in history:
                if msg.get("streaming"):
                    self._stream_started[str(msg["ts"])] = -math.inf
                    self._live_stream(msg)
                    ended.append(str(msg["ts"]))
        return ended

    def _chat_update(self, params: JsonDict) -> JsonDict:
        channel, msg = self._own_message(params, denied="cant_update_message")
        if self._live_stream(msg):
            raise _ApiError("cant_update_message")
        msg.pop("broken_pill", None)  # chat.update is what mends an expired stream
        content = self._content(params, max_chars=self.update_max_chars)
        if "markdown_text" in content:
            msg.pop("blocks", None)
        else:
            msg.pop("markdown_text", None)
        msg |= content | {"edited": {"user": self.identity.user_id, "ts": self.events.next_ts()}}
        return {"channel": channel, "ts": msg["ts"], "text": msg.get("text", ""), "message": msg}

    # streaming (docs.slack.dev/reference/methods/chat.startStream, .appendStream, .stopStream)

    def _stream_text(self, params: JsonDict, *, required: bool) -> str:
        parts: list[str] = []
        if params.get("markdown_text") is not None:
            parts.append(str(params["markdown_text"]))
        for chunk in params.get("chunks") or []:
            if not isinstance(chunk, dict) or chunk.get("type") != "markdown_text":
                raise _ApiError("invalid_chunks")
            parts.append(str(chunk.get("text") or ""))
        text = "".join(parts)
        if required and not text:
            raise _ApiError("no_text")
        if len(text) > self.markdown_max_chars:
            raise _ApiError("msg_too_long")
        return text

    def _refuse_streaming(self) -> None:
        if self.streaming_refusal is not None:
            raise _ApiError(self.streaming_refusal)

    def _chat_start_stream(self, params: JsonDict) -> JsonDict:
        self._refuse_streaming()
        channel = self._required(params, "channel", "channel_not_found")
        thread_ts = self._required(params, "thread_ts", "invalid_arguments")
        if not channel.startswith("D"):  # "Required when streaming to channels"
            if not params.get("recipient_user_id"):
                raise _ApiError("missing_recipient_user_id")
            if not params.get("recipient_team_id"):
                raise _ApiError("missing_recipient_team_id")
        text = self._stream_text(params, required=False)
        msg = self._bot_message({"text": text, "markdown_text": text})
        msg |= {"thread_ts": thread_ts, "streaming": True}
        self.shown_status.pop((channel, str(thread_ts)), None)  # a reply clears it
        self._stream_started[str(msg["ts"])] = self.clock()
        if params.get("recipient_user_id"):
            msg["recipient_user_id"] = str(params["recipient_user_id"])
        self._store(channel, msg)
        return {"channel": channel, "ts": msg["ts"]}

    def _streaming_message(self, params: JsonDict) -> JsonDict:
        self._refuse_streaming()
        _, msg = self._own_message(params, denied="cant_update_message")
        if not self._live_stream(msg):
            raise _ApiError("message_not_in_streaming_state")
        return msg

    def _append(self, msg: JsonDict, text: str) -> None:
        total = msg["markdown_text"] + text
        if len(total) > self.markdown_max_chars:
            raise _ApiError("msg_too_long")
        msg["text"] = msg["markdown_text"] = total

    def _chat_append_stream(self, params: JsonDict) -> JsonDict:
        msg = self._streaming_message(params)
        self._append(msg, self._stream_text(params, required=True))
        return {"channel": params["channel"], "ts": msg["ts"]}

    def _chat_stop_stream(self, params: JsonDict) -> JsonDict:
        msg = self._streaming_message(params)
        self._append(msg, self._stream_text(params, required=False))
        blocks = params.get("blocks")
        if blocks is not None:
            check_message_blocks(blocks)
            msg["blocks"] = blocks
        if isinstance(params.get("metadata"), dict):
            msg["metadata"] = params["metadata"]
        msg["streaming"] = False
        return {"channel": params["channel"], "ts": msg["ts"], "message": msg}

    def pings(self, channel: str) -> list[str]:
        """The mentions that notified someone in the bot's messages in ``channel`` (their
        ``markdown_text`` rendered by :func:`render_markdown_text`)."""
        found: list[str] = []
        for msg in self._history.get(channel, []):
            if msg.get("user") != self.identity.user_id:
                continue
            if "markdown_text" in msg:
                found += render_markdown_text(str(msg["markdown_text"]))[1]
            elif msg.get("blocks"):  # the markdown blocks, and the notification text
                found += render_markdown_text(shown_markdown(msg))[1]
                found += render_markdown_text(str(msg.get("text") or ""))[1]
        return found

    def _chat_post_ephemeral(self, params: JsonDict) -> JsonDict:
        channel = self._required(params, "channel", "channel_not_found")
        user = self._required(params, "user", "user_not_in_channel")
        msg = self._bot_message(self._content(params, max_chars=self.post_max_chars))
        if params.get("thread_ts"):
            msg["thread_ts"] = str(params["thread_ts"])
        self.ephemerals.append(msg | {"channel": channel, "to_user": user})
        return {"message_ts": msg["ts"]}

    def _chat_delete(self, params: JsonDict) -> JsonDict:
        channel, msg = self._own_message(params, denied="cant_delete_message")
        self._history[channel].remove(msg)
        return {"channel": channel, "ts": msg["ts"]}

    def _conversations_replies(self, params: JsonDict) -> JsonDict:
        channel = self._required(params, "channel", "channel_not_found")
        ts = self._required(params, "ts", "thread_not_found")
        if self._find(channel, ts) is None:
            raise _ApiError("thread_not_found")
        thread = self.thread(channel, ts)
        start, limit = int(params.get("cursor") or 0), int(params.get("limit") or 1000)
        page = thread[start : start + limit]
        more = start + limit < len(thread)
        cursor = str(start + limit) if more else ""
        return {"messages": page, "has_more": more, "response_metadata": {"next_cursor": cursor}}

    def _conversations_history(self, params: JsonDict) -> JsonDict:
        """Top-level messages (thread replies left out), newest first, between ``oldest``
        and ``latest`` (exclusive unless ``inclusive``), ``limit`` at most, as Slack does."""
        channel = self._required(params, "channel", "channel_not_found")
        inclusive = str(params.get("inclusive", "")).lower() in ("1", "true")
        oldest, latest = params.get("oldest"), params.get("latest")

        def inside(ts: str) -> bool:
            low = oldest is None or (
                _ts_key(ts) >= _ts_key(str(oldest))
                if inclusive
                else _ts_key(ts) > _ts_key(str(oldest))
            )
            high = latest is None or (
                _ts_key(ts) <= _ts_key(str(latest))
                if inclusive
                else _ts_key(ts) < _ts_key(str(latest))
            )
            return low and high

        top = [
            m
            for m in self._history.get(channel, [])
            if m.get("thread_ts") in (None, m["ts"]) and inside(m["ts"])
        ]
        newest_first = list(reversed(top))
        start, limit = int(params.get("cursor") or 0), int(params.get("limit") or 100)
        page = newest_first[start : start + limit]
        more = start + limit < len(newest_first)
        cursor = str(start + limit) if more else ""
        return {"messages": page, "has_more": more, "response_metadata": {"next_cursor": cursor}}

    def _conversations_open(self, params: JsonDict) -> JsonDict:
        if params.get("channel"):
            return {"channel": {"id": params["channel"]}}
        users = self._required(params, "users", "users_list_not_supplied").split(",")
        if len(users) != 1:
            raise _ApiError("not_supported")  # multi-person DMs are out of scope
        return {"channel": {"id": self.events.dm_channel(users[0].strip())}}

    def _conversations_info(self, params: JsonDict) -> JsonDict:
        channel = self._required(params, "channel", "channel_not_found")
        info: JsonDict = {
            "id": channel,
            "name": self.channel_names.get(channel, channel.lower()),
            "is_channel": channel.startswith("C"),
            "is_group": channel.startswith("G"),
            "is_im": channel.startswith("D"),
            "is_mpim": channel in self.group_dms,
            "is_private": not channel.startswith("C") or channel in self.private_channels,
            "is_member": True,
        }
        if channel.startswith("D"):
            info["user"] = "U" + channel[1:]
        return {"channel": info}

    def _assistant_set_status(self, params: JsonDict) -> JsonDict:
        self._required(params, "channel_id", "channel_not_found")
        self._required(params, "thread_ts")
        loading = params.get("loading_messages")
        if loading is not None and not (
            isinstance(loading, list)
            and len(loading) <= MAX_LOADING_MESSAGES
            and all(isinstance(m, str) and 0 < len(m) <= MAX_LOADING_MESSAGE_CHARS for m in loading)
        ):
            raise _ApiError("invalid_arguments")
        self.statuses.append(dict(params))
        where = (str(params["channel_id"]), str(params["thread_ts"]))
        if params.get("status"):
            self.shown_status[where] = str(params["status"])
        else:
            self.shown_status.pop(where, None)
        return {}

    def _assistant_set_prompts(self, params: JsonDict) -> JsonDict:
        self._required(params, "channel_id", "channel_not_found")
        prompts = params.get("prompts")
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_SUGGESTED_PROMPTS:
            raise _ApiError("invalid_arguments")
        for prompt in prompts:
            if not isinstance(prompt, dict) or not prompt.get("title") or not prompt.get("message"):
                raise _ApiError("invalid_arguments")
        if self.agent_app and params.get("thread_ts"):
            return {}  # Slack: "Including it in a call for an agent app will cause the call
            # to silently fail" (docs.slack.dev, assistant.threads.setSuggestedPrompts)
        self.prompts.append(dict(params))
        return {}

    def _views_publish(self, params: JsonDict) -> JsonDict:
        user = self._required(params, "user_id", "user_not_found")
        view = params.get("view")
        if not isinstance(view, dict) or view.get("type") != "home":
            raise _ApiError("invalid_arguments")
        blocks = view.get("blocks")
        if not isinstance(blocks, list) or len(blocks) > MAX_VIEW_BLOCKS:
            raise _ApiError("invalid_blocks")
        if len(str(view.get("private_metadata") or "")) > MAX_PRIVATE_METADATA_CHARS:
            raise _ApiError("invalid_arguments")
        if len(str(view.get("callback_id") or "")) > MAX_CALLBACK_ID_CHARS:
            raise _ApiError("invalid_arguments")
        check_message_blocks(blocks, max_blocks=MAX_VIEW_BLOCKS)
        stored = dict(view) | {"id": f"V{next(self._ids):06d}", "hash": uuid.uuid4().hex}
        self.home_views[user] = stored
        return {"view": stored}

    def _apps_connections_open(self, params: JsonDict) -> JsonDict:
        ticket = str(uuid.uuid4())
        self._tickets.add(ticket)
        query = urlencode({"ticket": ticket, "app_id": self.identity.app_id})
        return {"url": f"ws://{self.host}:{self._port}/socket-mode?{query}"}

    def _files_get_upload_url(self, params: JsonDict) -> JsonDict:
        filename = self._required(params, "filename")
        length = int(self._required(params, "length"))
        file_id = f"F{next(self._ids):08d}"
        self.files[file_id] = UploadedFile(
            file_id, filename, length, params.get("alt_txt"), params.get("snippet_type")
        )
        return {"upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}

    def _files_complete_upload(self, params: JsonDict) -> JsonDict:
        items = params.get("files")
        if not isinstance(items, list) or not items:
            raise _ApiError("invalid_arguments")
        uploads = [self.files.get(str(item.get("id"))) for item in items]
        if any(f is None or f.content is None for f in uploads):
            raise _ApiError("file_not_found")
        channels = [c for c in str(params.get("channels") or "").split(",") if c]
        if params.get("channel_id"):
            channels.insert(0, str(params["channel_id"]))
        thread_ts, comment = params.get("thread_ts"), params.get("initial_comment")
        shared: list[JsonDict] = []
        for item, upload in zip(items, uploads, strict=True):
            assert upload is not None
            assert upload.content is not None
            upload.title = item.get("title") or upload.filename
            upload.channels, upload.completed = channels, True
            upload.initial_comment, upload.thread_ts = comment, thread_ts
            shared.append(
                {
                    "id": upload.id,
                    "name": upload.filename,
                    "title": upload.title,
                    "size": len(upload.content),
                    "channels": channels,
                }
            )
        for channel in channels:
            msg = self._bot_message({"text": comment or "", "files": shared, "upload": True})
            self._store(channel, msg | ({"thread_ts": thread_ts} if thread_ts else {}))
        return {"files": shared}

    async def _handle_upload(self, request: web.Request) -> web.Response:
        upload = self.files.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404, text="file_not_found")
        if request.content_type.startswith("multipart/"):
            part = next(iter((await request.post()).values()), "")
            upload.content = part.file.read() if isinstance(part, FileField) else str(part).encode()
        else:
            upload.content = await request.read()
        await self._notify()
        return web.Response(text=f"OK - {len(upload.content)}", content_type="text/plain")

    async def _handle_respond(self, request: web.Request) -> web.Response:
        bodies = self._responses.get(request.match_info["response_id"])
        if bodies is None:
            return web.json_response({"ok": False, "error": "expired_url"}, status=404)
        bodies.append(await request.json())
        await self._notify()
        return web.json_response({"ok": True})

    # ---- Socket Mode --------------------------------------------------------------------

    async def _handle_socket(self, request: web.Request) -> web.WebSocketResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            raise web.HTTPUnauthorized(text="invalid ticket")
        self._tickets.discard(ticket)
        if self._refuse_sockets > 0:
            self._refuse_sockets -= 1
            self.sockets_refused += 1
            raise web.HTTPServiceUnavailable(text="refused by the fake")
        ws = web.WebSocketResponse()  # autoping: pongs the SDK's "sdk-ping-pong:<t>" pings
        await ws.prepare(request)
        self._sockets.append(ws)
        self._socket_requests[id(ws)] = request
        self.socket_connections += 1
        try:
            await ws.send_json(
                {
                    "type": "hello",
                    "num_connections": len(self._sockets),
                    "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": self.identity.app_id},
                }
            )
            await self._notify()
            if self.redeliver_unacked:
                await self._redeliver(ws)
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    with contextlib.suppress(ValueError):
                        data = json.loads(msg.data)
                        if isinstance(data, dict) and "envelope_id" in data:
                            self.acks.append(data)
                            self._unacked.pop(str(data["envelope_id"]), None)
                            await self._notify()
        finally:
            self._sockets.remove(ws)
            self._socket_requests.pop(id(ws), None)
        return ws

    async def _redeliver(self, ws: web.WebSocketResponse) -> None:
        for envelope_id, (envelope, sent_on) in list(self._unacked.items()):
            if sent_on == id(ws):
                continue
            del self._unacked[envelope_id]
            again = envelope | {
                "envelope_id": str(uuid.uuid4()),
                "retry_attempt": int(envelope.get("retry_attempt", 0)) + 1,
                "retry_reason": "timeout",
            }
            self.envelopes.append(again)
            self.redelivered.append(again)
            self._unacked[str(again["envelope_id"])] = (again, id(ws))
            await ws.send_json(again)
        await self._notify()

    def check_subscribed(self, event: Any) -> None:
        """Raise :class:`Unsubscribed` unless the app subscribes to ``event`` (anything but an
        event object is passed through: hostile-body tests send such things on purpose)."""
        if not isinstance(event, dict):
            return
        wanted = subscription_of(event)
        if wanted not in self.bot_events:
            raise Unsubscribed(
                f"fake Slack: the app does not subscribe to {wanted} (manifest.yml bot_events:"
                f" {sorted(self.bot_events)}), so Slack never sends it"
            )

    def revoke_bot_token(self, error: str = "token_revoked") -> str:
        """Revoke the bot token (reinstalling the app issues a new one): every call with the
        old one fails with ``error`` (``invalid_auth``, ``token_revoked``, ``account_inactive``
        ...). Returns the new token, now ``bot_token``. Events about it (``tokens_revoked``,
        ``app_uninstalled``) are sent by the test."""
        self.revoked_tokens[self.bot_token] = error
        self.bot_token = f"xoxb-fake-bot-token-{len(self.revoked_tokens) + 1}"
        return self.bot_token

    def revoke_app_token(self, error: str = "token_revoked") -> str:
        """Revoke the app-level token (``xapp-``, Basic Information -> App-Level Tokens ->
        Revoke): ``apps.connections.open`` with it fails with ``error`` (``token_revoked``,
        ``invalid_auth``...) from now on. Connections already open stay open (Slack documents
        nothing else); they end at the next refresh ("Connections refresh regularly",
        docs.slack.dev, Socket Mode): :meth:`disconnect_sockets`. Returns the new token, now
        ``app_token``."""
        self.revoked_tokens[self.app_token] = error
        self.app_token = f"xapp-fake-app-token-{len(self.revoked_tokens) + 1}"
        return self.app_token

    def refuse_connections(self, times: int) -> None:
        """Fail the next ``times`` ``apps.connections.open`` calls with HTTP 500."""
        self.fail_next("apps.connections.open", error="internal_error", status=500, times=times)

    def refuse_sockets(self, times: int | None = None) -> None:
        """Refuse the next ``times`` websocket handshakes with HTTP 503; with no ``times``,
        every handshake until :meth:`accept_sockets` (a test that asserts on the time spent
        down then holds it down itself, whatever the bot's jittered backoff draws)."""
        self._refuse_sockets += math.inf if times is None else times

    def accept_sockets(self) -> None:
        """End :meth:`refuse_sockets`: the next handshake is accepted."""
        self._refuse_sockets = 0

    async def push_then_drop(self, type: str, payload: JsonDict, **kwargs: Any) -> str:
        """Send an envelope and reset the connection at once: the app receives it but its
        ack cannot arrive (an abrupt close mid-event). Returns the ``envelope_id``."""
        envelope_id = await self.push_envelope(type, payload, **kwargs)
        await self.drop_sockets(abrupt=True)
        return envelope_id

    @property
    def open_sockets(self) -> int:
        return len(self._sockets)

    async def wait_for_socket(self, *, connections: int = 1, timeout_s: float = 5.0) -> None:
        """Wait until ``connections`` websockets have been accepted in total, one still open."""
        await self.wait_until(
            lambda: self.socket_connections >= connections and bool(self._sockets),
            timeout_s=timeout_s,
            what=f"Socket Mode connection #{connections}",
        )

    async def push_envelope(
        self,
        type: str,
        payload: Any,
        *,
        retry_attempt: int = 0,
        retry_reason: str = "",
        accepts_response_payload: bool | None = None,
        envelope_id: str | None = None,
        connect_timeout_s: float = 5.0,
    ) -> str:
        """Send an envelope over the newest Socket Mode connection; return its ``envelope_id``.

        ``type`` is ``events_api``, ``slash_commands`` or ``interactive``; the envelope is
        ``{envelope_id, type, payload, accepts_response_payload, retry_attempt, retry_reason}``.
        """
        events_api = type == "events_api" and isinstance(payload, dict)
        if events_api:
            self.check_subscribed(payload.get("event"))
        await self.wait_for_socket(timeout_s=connect_timeout_s)
        envelope: JsonDict = {
            "envelope_id": envelope_id or str(uuid.uuid4()),
            "type": type,
            "payload": payload,
            "accepts_response_payload": (
                type != "events_api"
                if accepts_response_payload is None
                else accepts_response_payload
            ),
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
        }
        if events_api and isinstance(payload.get("event"), dict):
            self._observe_event(payload["event"])
        self.envelopes.append(envelope)
        if not self._sockets:  # it closed meanwhile: the next connection gets it (Slack queues)
            self._unacked[str(envelope["envelope_id"])] = (envelope, 0)
            return str(envelope["envelope_id"])
        socket = self._sockets[-1]
        if type == "events_api":
            self._unacked[str(envelope["envelope_id"])] = (envelope, id(socket))
        await socket.send_json(envelope)
        return str(envelope["envelope_id"])

    async def push_event(self, event: JsonDict, **kwargs: Any) -> str:
        """``push_envelope("events_api", event_callback(event))``."""
        return await self.push_envelope("events_api", self.events.event_callback(event), **kwargs)

    def ack_for(self, envelope_id: str) -> JsonDict | None:
        """The first ack ``{envelope_id, payload?}`` received for an envelope, if any."""
        return next((a for a in self.acks if a.get("envelope_id") == envelope_id), None)

    async def wait_for_ack(self, envelope_id: str, timeout_s: float = 5.0) -> JsonDict:
        await self.wait_until(
            lambda: self.ack_for(envelope_id) is not None, timeout_s=timeout_s, what="ack"
        )
        ack = self.ack_for(envelope_id)
        assert ack is not None
        return ack

    async def disconnect_sockets(
        self, reason: str = "refresh_requested", *, close: bool | None = None
    ) -> None:
        """Send Slack's ``{"type": "disconnect"}``; the SDK then opens a new connection.
        ``close`` (default: only for ``link_disabled``) closes the sockets afterwards."""
        for ws in list(self._sockets):
            await ws.send_json({"type": "disconnect", "reason": reason, "debug_info": {}})
        if close or (close is None and reason == "link_disabled"):
            for ws in list(self._sockets):
                await ws.close(code=WSCloseCode.POLICY_VIOLATION)

    async def drop_sockets(self, *, abrupt: bool = False) -> None:
        """Close every connection from the server side, as a network drop would;
        ``abrupt`` resets the TCP connection without a close frame."""
        for ws in list(self._sockets):
            request = self._socket_requests.get(id(ws))
            if abrupt and request is not None and request.transport is not None:
                request.transport.abort()
            else:
                await ws.close(code=WSCloseCode.GOING_AWAY)

    # ---- inbound HTTP to the app --------------------------------------------------------

    async def post_signed(
        self,
        app_url: str,
        body: bytes,
        *,
        content_type: str,
        sent: JsonDict,
        signature: Signature = "valid",
        retry_num: int | None = None,
        retry_reason: str | None = None,
    ) -> InboundResponse:
        """POST ``body`` to the app as Slack would: signed, optionally as a retry.

        ``signature``: ``valid``; ``forged`` (wrong secret); ``stale`` (timestamp 10 minutes
        old, correctly signed); ``missing`` (no signature headers).
        """
        assert self._session is not None, "FakeSlack.start() first"
        headers = {"Content-Type": content_type}
        if signature != "missing":
            secret = (
                "forged-" + self.signing_secret if signature == "forged" else self.signing_secret
            )
            stamp = int(time.time()) - (600 if signature == "stale" else 0)
            headers |= sign(body, secret, stamp)
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = retry_reason or "http_timeout"
        # aiohttp warns of raw bytes past 1 MiB (they are sent in one write): a stream instead
        data: bytes | io.BytesIO = io.BytesIO(body) if len(body) > 1024 * 1024 else body
        async with self._session.post(app_url, data=data, headers=headers) as resp:
            return InboundResponse(resp.status, await resp.text(), dict(resp.headers), sent)

    async def send_event(
        self, app_url: str, event: JsonDict, *, event_id: str | None = None, **kwargs: Any
    ) -> InboundResponse:
        """POST an event_callback (``event``, or a whole envelope) as JSON; see ``post_signed``."""
        envelope = (
            event
            if event.get("type") == "event_callback"
            else self.events.event_callback(event, event_id=event_id)
        )
        self.check_subscribed(envelope["event"])
        self._observe_event(envelope["event"])
        body = json.dumps(envelope).encode()
        return await self.post_signed(
            app_url, body, content_type="application/json", sent=envelope, **kwargs
        )

    async def deliver_event(
        self,
        app_url: str,
        event: JsonDict,
        *,
        event_id: str | None = None,
        retry_delays_s: tuple[float, ...] = SLACK_RETRY_DELAYS_S,
        timeout_s: float = ACK_TIMEOUT_S,
    ) -> list[int]:
        """Deliver an event over HTTP as Slack does, with its retries: a delivery answered
        with a non-2xx status, not answered within ``timeout_s`` (Slack: 3 s) or refused a
        connection is sent again after each of ``retry_delays_s`` (Slack: three retries,
        after about 0 s, 1 min and 5 min, compressed here) with ``X-Slack-Retry-Num`` 1, 2, 3
        and ``X-Slack-Retry-Reason`` ``http_error`` / ``http_timeout`` /
        ``connection_failed``; the first 2xx ends it. Returns each attempt's status (0: timed
        out, -1: connection refused). https://docs.slack.dev/apis/events-api/#retries
        """
        envelope = (
            event
            if event.get("type") == "event_callback"
            else self.events.event_callback(event, event_id=event_id)
        )
        statuses: list[int] = []
        reason: str | None = None
        for attempt, delay in enumerate((0.0, *retry_delays_s)):
            await asyncio.sleep(delay)
            try:
                async with asyncio.timeout(timeout_s):
                    sent = await self.send_event(
                        app_url,
                        envelope,
                        retry_num=attempt or None,
                        retry_reason=reason,
                    )
            except TimeoutError:
                statuses.append(0)
                reason = "http_timeout"
            except OSError:
                statuses.append(-1)
                reason = "connection_failed"
            else:
                statuses.append(sent.status)
                if 200 <= sent.status < 300:
                    break
                reason = "http_error"
            finally:
                self.deliveries[str(envelope["event_id"])] = list(statuses)
                await self._notify()
        return statuses

    async def deliver_socket_event(
        self,
        event: JsonDict,
        *,
        event_id: str | None = None,
        retry_delays_s: tuple[float, ...] = SLACK_RETRY_DELAYS_S,
        ack_timeout_s: float = ACK_TIMEOUT_S,
    ) -> list[str]:
        """Deliver an event over Socket Mode as Slack does, with its retries: an envelope
        not acknowledged (``{envelope_id}`` sent back) within ``ack_timeout_s`` is sent again,
        as a new envelope with ``retry_attempt`` 1, 2, 3 and ``retry_reason: "timeout"``,
        after each of ``retry_delays_s``. Returns the envelope ids sent; the last one is
        acknowledged unless every attempt failed (check ``ack_for``)."""
        payload = (
            event
            if event.get("type") == "event_callback"
            else self.events.event_callback(event, event_id=event_id)
        )
        sent: list[str] = []
        for attempt, delay in enumerate((0.0, *retry_delays_s)):
            await asyncio.sleep(delay)
            envelope_id = await self.push_envelope(
                "events_api",
                payload,
                retry_attempt=attempt,
                retry_reason="timeout" if attempt else "",
            )
            sent.append(envelope_id)
            try:
                await self.wait_for_ack(envelope_id, timeout_s=ack_timeout_s)
            except TimeoutError:
                self.deliveries[str(payload["event_id"])].append(0)
                await self._notify()
                continue
            self.deliveries[str(payload["event_id"])].append(200)
            await self._notify()
            break
        return sent

    async def send_slash_command(
        self, app_url: str, command: str, text: str = "", **kwargs: Any
    ) -> InboundResponse:
        """POST a form-encoded slash command; ``response_url`` points at this fake.

        Keyword arguments go to ``SlackEvents.slash_command`` or ``post_signed``.
        """
        post_keys = {"signature", "retry_num", "retry_reason"}
        post = {k: v for k, v in kwargs.items() if k in post_keys}
        form = self.events.slash_command(
            command, text, **{k: v for k, v in kwargs.items() if k not in post_keys}
        )
        body = urlencode(form).encode()
        content_type = "application/x-www-form-urlencoded"
        return await self.post_signed(app_url, body, content_type=content_type, sent=form, **post)

    async def send_interaction(
        self, app_url: str, payload: JsonDict, **kwargs: Any
    ) -> InboundResponse:
        """POST an interaction (form field ``payload`` = JSON), e.g. ``events.block_actions()``."""
        body = urlencode({"payload": json.dumps(payload)}).encode()
        content_type = "application/x-www-form-urlencoded"
        return await self.post_signed(
            app_url, body, content_type=content_type, sent=payload, **kwargs
        )

    # ---- control surface for the process mode -------------------------------------------

    async def _control_envelope(self, request: web.Request) -> web.Response:
        spec = await request.json()
        try:
            envelope_id = await self.push_envelope(
                spec["type"],
                spec["payload"],
                retry_attempt=int(spec.get("retry_attempt", 0)),
                retry_reason=str(spec.get("retry_reason", "")),
            )
        except Unsubscribed as exc:
            return web.json_response({"error": str(exc)}, status=400)
        ack = None
        if spec.get("wait_ack"):
            with contextlib.suppress(TimeoutError):
                ack = await self.wait_for_ack(envelope_id, float(spec.get("timeout_s", 5.0)))
        return web.json_response({"envelope_id": envelope_id, "ack": ack})

    async def _control_fail(self, request: web.Request) -> web.Response:
        spec = await request.json()
        self.fail_next(
            spec["method"],
            error=spec.get("error", "ratelimited"),
            status=spec.get("status"),
            retry_after=spec.get("retry_after"),
            times=int(spec.get("times", 1)),
        )
        return web.json_response({"ok": True})

    async def _control_response_url(self, request: web.Request) -> web.Response:
        return web.json_response({"url": self.new_response_url()})

    async def _control_calls(self, request: web.Request) -> web.Response:
        calls = self.calls(request.query.get("method"))
        rows = [
            {"method": c.method, "params": c.params, "status": c.status, "at": c.at} for c in calls
        ]
        return web.json_response({"calls": rows})

    async def _control_messages(self, request: web.Request) -> web.Response:
        return web.json_response({"messages": self.messages(request.query.get("channel", ""))})


@contextlib.asynccontextmanager
async def running_fake_slack(**options: Any) -> AsyncIterator[FakeSlack]:
    """A started ``FakeSlack(**options)``, stopped on exit."""
    async with FakeSlack(**options) as fake:
        yield fake


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    options = {
        "bot_token": args.bot_token,
        "app_token": args.app_token,
        "signing_secret": args.signing_secret,
    }
    async with running_fake_slack(host=args.host, port=args.port, **options) as fake:
        urls = {"base_url": fake.base_url, "api_url": fake.api_url, "pid": os.getpid()}
        print(json.dumps(urls), flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Slack until SIGTERM.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--bot-token", default="xoxb-fake-bot-token")
    parser.add_argument("--app-token", default="xapp-fake-app-token")
    parser.add_argument("--signing-secret", default="fake-signing-secret")
    asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
