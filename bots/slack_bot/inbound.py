"""What Slack sends, checked before Bolt or any handler reads it: one rule for both modes.

A request over HTTP or an envelope over Socket Mode reaches Bolt only when its shape is one
the handlers can read; anything else is dropped in one logged line (never message text),
never a traceback: over HTTP an unsigned request gets 401 (:func:`signature_headers_ok`
first, so that no hostile header reaches the signature check's ``int()`` or
``hmac.compare_digest``) and a signed but unreadable one 400; over Socket Mode an unreadable
envelope is acknowledged (a redelivery would be just as unreadable) and dropped.

The shapes (docs.slack.dev: Events API envelopes, slash commands, ``block_actions``
payloads; Socket Mode envelopes): a payload is a JSON object; an ``event_callback``'s
``event`` is an object whose string fields are strings and whose ``ts`` / ``thread_ts`` /
``event_ts`` are Slack timestamps (:data:`SLACK_TS`: digits, a dot, digits; never ``nan``
or ``1e400``, which ``float()`` would take); a slash command carries ``command``,
``user_id`` and ``response_url`` (its only way to answer); an interaction a ``user`` object
with an ``id`` and a list of ``actions`` objects, and, on a message, a ``response_url``.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
"""The largest request body (HTTP) or Socket Mode frame handled, in both modes. Slack documents
no maximum; the largest payloads it documents (a message of 40,000 characters with 50
blocks, a view of 100 blocks of up to 3,000 characters) stay near 2 MB even with every
character JSON-escaped, so this leaves eight times that. (aiohttp's defaults, 1 MiB for an
HTTP body and 4 MiB for a websocket frame, are below some real events.)"""
MAX_TIMESTAMP_DIGITS = 20
"""``X-Slack-Request-Timestamp`` is epoch seconds (10 digits today); a longer one is not
Slack's, and Python refuses ``int()`` of more than 4,300 digits with a ValueError."""
MAX_SIGNATURE_CHARS = 128
"""``X-Slack-Signature`` is ``v0=`` and 64 hex digits."""
SLACK_TS = re.compile(r"\d{1,12}\.\d{1,9}")
"""A Slack message timestamp, ``"1732881234.000100"`` (docs.slack.dev: "ts" values are
strings of epoch seconds and a sequence number)."""
EVENT_STRING_FIELDS = (
    "type",
    "subtype",
    "user",
    "channel",
    "channel_type",
    "text",
    "team",
    "bot_id",
    "tab",
    "client_msg_id",
)
EVENT_TS_FIELDS = ("ts", "thread_ts", "event_ts")
SLASH_FIELDS = ("command", "user_id", "response_url")


def signature_headers_ok(timestamp: str, signature: str) -> bool:
    """Whether the signature headers are shaped as Slack's, before they are checked:
    ``timestamp`` up to :data:`MAX_TIMESTAMP_DIGITS` ASCII digits, ``signature`` ASCII."""
    return (
        timestamp.isascii()
        and timestamp.isdigit()
        and len(timestamp) <= MAX_TIMESTAMP_DIGITS
        and signature.isascii()
        and len(signature) <= MAX_SIGNATURE_CHARS
    )


def parse_http_body(body: str, content_type: str | None) -> Any:
    """The payload of a signed HTTP request as Bolt parses it (JSON, a form's ``payload``
    field as JSON, or the form itself); ``ValueError`` when it is not readable."""
    if not body:
        return {}
    if content_type == "application/json" or body.lstrip().startswith(("{", "[")):
        return json.loads(body)
    form = dict(parse_qsl(body, keep_blank_values=True, strict_parsing=False))
    if "payload" in form:
        return json.loads(form["payload"])
    return form


def problem(payload: Any, *, kind: str | None = None) -> str | None:
    """Why ``payload`` cannot be handled, or None. ``kind``: the Socket Mode envelope's
    ``type`` (``events_api``, ``slash_commands``, ``interactive``); over HTTP it is read from
    the payload itself."""
    if not isinstance(payload, dict):
        return f"payload is {type(payload).__name__}, not an object"
    if kind == "events_api" or payload.get("type") == "event_callback":
        return _event_problem(payload.get("event"))
    if kind == "slash_commands" or (kind is None and "command" in payload):
        missing = [k for k in SLASH_FIELDS if not _text(payload.get(k))]
        return f"slash command without {', '.join(missing)}" if missing else None
    if kind == "interactive" or payload.get("type") == "block_actions":
        return _interaction_problem(payload)
    return None


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _event_problem(event: Any) -> str | None:
    if not isinstance(event, dict):
        return f"event is {type(event).__name__}, not an object"
    for key in EVENT_STRING_FIELDS:
        if event.get(key) is not None and not isinstance(event[key], str):
            return f"event {key} is not a string"
    for key in EVENT_TS_FIELDS:
        value = event.get(key)
        if value is not None and not (isinstance(value, str) and SLACK_TS.fullmatch(value)):
            return f"event {key} is not a Slack timestamp"
    return None


def _interaction_problem(payload: dict[str, Any]) -> str | None:
    user, actions = payload.get("user"), payload.get("actions", [])
    if not isinstance(user, dict) or not _text(user.get("id")):
        return "interaction without a user id"
    if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
        return "interaction actions are not a list of objects"
    for key in ("view", "container", "channel", "team", "message"):
        if payload.get(key) is not None and not isinstance(payload[key], dict):
            return f"interaction {key} is not an object"
    container = payload.get("container") or {}
    if container.get("type") == "message" and not _text(payload.get("response_url")):
        return "message interaction without response_url"
    return None
