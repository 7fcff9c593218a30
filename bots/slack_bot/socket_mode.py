"""Slack Socket Mode that stays connected: refresh handovers, reconnects, fatal stops.

:class:`SocketModeLink` replaces slack_sdk's aiohttp ``SocketModeClient`` (3.48) for one
reason each (read in its ``socket_mode/aiohttp/__init__.py`` and ``async_client.py``):

- on a ``disconnect`` envelope the SDK closes the old connection *before* it opens the new
  one, so events sent in between wait for a redelivery; here the new connection is open
  (its ``hello`` received) before the old one is closed (``refresh_requested``, ``warning``);
- its ``connect()`` retries the same websocket URL every ``ping_interval`` forever once a
  handshake fails, and Slack's URLs are single-use tickets, so a refused connection leaves it
  stuck for good; a failed ``apps.connections.open`` inside a ``disconnect`` handler is
  logged and never retried (python-slack-sdk#1446). Here every attempt asks for a new URL,
  with exponential backoff and full jitter (tenacity's ``wait_random_exponential``;
  "Exponential Backoff And Jitter", AWS Architecture Blog, 2015), forever;
- a refused app token, an app Slack will not connect (``forbidden_team`` and the other
  :data:`REFUSED_APP_ERRORS`) or ``link_disabled`` is retried forever by the SDK; here it
  stops the link with one :class:`~core.errors.ConfigError` naming what to fix (a process
  manager restarts the process).

Envelopes go to Bolt (``run_async_bolt_app``, as slack_bolt's own handler does) and are
acknowledged on the connection they came on once Bolt returns 200 (the message is stored by
then); an envelope whose connection dropped first is not acknowledged, so Slack redelivers it
on the new connection and the intake's event claim answers it once.

Frames: Slack documents no maximum frame size (docs.slack.dev, "Socket Mode" and "Socket
Mode implementation"), and slack_sdk's own aiohttp client keeps aiohttp's 4 MiB default, past
which a frame drops the connection (and each redelivery drops it again). The largest payloads
Slack documents (a message of 40,000 characters with 50 blocks, a view of 100 blocks of up to
3,000 characters) stay near 2 MB even with every character JSON-escaped, so frames up to
:data:`MAX_ENVELOPE_BYTES` (16 MiB) are read and handled; larger ones, up to
:data:`MAX_FRAME_BYTES` (64 MiB, what is held in memory at most), are acknowledged when their
``envelope_id`` can be read and dropped with one logged line. Envelopes whose payload is not
what the handlers read (:mod:`bots.slack_bot.inbound`) are acknowledged and dropped too: a
redelivery would be the same.

Wire format (docs.slack.dev, "Using Socket Mode"): server frames are JSON objects:
``{"type": "hello", ...}``, ``{"type": "disconnect", "reason": ...}`` and envelopes
``{envelope_id, type, payload, accepts_response_payload, retry_attempt, retry_reason}``; the
ack is ``{"envelope_id": ..., "payload"?: ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientError, ClientSession, ClientWebSocketResponse, WSMsgType
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity.wait import wait_random_exponential

from bots.slack_bot import inbound
from core.errors import ConfigError
from core.metrics import Readiness

logger = logging.getLogger(__name__)

PLATFORM = "slack"
HANDOVER_REASONS = frozenset({"refresh_requested", "warning"})
"""``disconnect`` reasons after which the old connection still works for a while (Slack
sends ``warning`` about 10 s before a ``refresh_requested``): open the new one first."""
REFUSED_TOKEN_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
    }
)
"""``apps.connections.open`` errors that say the app-level token is no good (docs.slack.dev,
method page): no retry fixes them."""
REFUSED_APP_ERRORS = frozenset(
    {
        "forbidden_team",
        "team_access_not_granted",
        "team_added_to_org",
        "enterprise_is_restricted",
        "access_denied",
        "no_permission",
        "missing_scope",
        "ekm_access_denied",
        "two_factor_setup_required",
        "org_login_required",
        "method_deprecated",
        "deprecated_endpoint",
        "invalid_arguments",
        "invalid_arg_name",
    }
)
"""``apps.connections.open`` errors that say this app may not connect here, or that the call
itself is wrong (docs.slack.dev, method page: ``forbidden_team`` "the authenticated team
cannot use this API"): no retry fixes them either, so they stop the process with one line
instead of a reconnect loop; only network failures, 5xx, ``ratelimited``,
``internal_error``, ``fatal_error``, ``service_unavailable``, ``request_timeout`` and the like
are retried."""
HELLO_TIMEOUT_S = 10.0
"""How long a new websocket may take to send ``hello`` before the attempt counts as failed."""
PING_INTERVAL_S = 10.0
"""aiohttp heartbeat: a connection whose pong is this late is closed and reopened (the SDK's
``AsyncSocketModeHandler`` default ``ping_interval``)."""
ACK_DRAIN_S = 3.0
"""On close, envelopes being stored get this long to be acknowledged (Slack's ack limit)."""
MAX_ENVELOPE_BYTES = inbound.MAX_PAYLOAD_BYTES
"""Frames up to this size are handled (:data:`bots.slack_bot.inbound.MAX_PAYLOAD_BYTES`)."""
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""aiohttp's ``max_msg_size``: frames up to this size are read at all (larger ones close the
connection with 1009); those above :data:`MAX_ENVELOPE_BYTES` are only acknowledged."""
ENVELOPE_KINDS = frozenset({"events_api", "slash_commands", "interactive"})
_ENVELOPE_ID = re.compile(r'(?<!\\)"envelope_id"\s*:\s*"([0-9A-Za-z_-]{1,128})"')


class _Retry(Exception):
    """One connection attempt failed in a way a later attempt may not."""


@dataclass(eq=False)
class _Connection:
    """One websocket: its reader task and why it ended (a ``disconnect`` reason or
    ``closed``)."""

    ws: ClientWebSocketResponse
    number: int
    ended: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    reader: asyncio.Task[None] | None = None
    dispatches: set[asyncio.Task[None]] = field(default_factory=set)

    def end(self, reason: str) -> None:
        if not self.ended.done():
            self.ended.set_result(reason)


def ack_for(envelope_id: str, response: BoltResponse) -> dict[str, Any]:
    """The Socket Mode ack for Bolt's response: ``{envelope_id}``, plus ``payload`` when the
    listener answered with a body (JSON as is, text as ``{"text": ...}``)."""
    ack: dict[str, Any] = {"envelope_id": envelope_id}
    if response.body:
        content_type = (response.headers.get("content-type") or [""])[0]
        if content_type.startswith("application/json"):
            ack["payload"] = json.loads(response.body)
        else:
            ack["payload"] = {"text": response.body}
    return ack


class SocketModeLink:
    """Keeps one Socket Mode connection open for ``app`` until :meth:`close`.

    ``client`` makes the ``apps.connections.open`` calls (with ``app_token``); ``readiness``
    hears connected / disconnected. Backoff: attempt ``n`` waits uniform(0, min(``backoff_s``
    * 2^n, ``backoff_max_s``)) seconds. :attr:`failure` is set (and :meth:`wait_failed`
    returns) when Slack refuses the link for good.
    """

    def __init__(
        self,
        *,
        app: AsyncApp,
        client: AsyncWebClient,
        app_token: str,
        readiness: Readiness,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
    ) -> None:
        self._app = app
        self._client = client
        self._app_token = app_token
        self._readiness = readiness
        self._wait = wait_random_exponential(multiplier=backoff_s, max=backoff_max_s)
        self._session: ClientSession | None = None
        self._current: _Connection | None = None
        self._runner: asyncio.Task[None] | None = None
        self._dispatches: set[asyncio.Task[None]] = set()
        self._numbers = 0
        self._closed = False
        self._failed = asyncio.Event()
        self.failure: ConfigError | None = None
        self.connections = 0
        """Connections opened (``hello`` received), handovers included."""
        self.max_envelope_bytes = MAX_ENVELOPE_BYTES
        self.max_frame_bytes = MAX_FRAME_BYTES
        """Frame limits (:data:`MAX_ENVELOPE_BYTES`, :data:`MAX_FRAME_BYTES`); the second
        applies from the next connection."""

    # --- lifecycle

    async def start(self) -> None:
        """Open the first connection (retrying as any reconnect does), then keep it open in
        the background. Raises ``ConfigError`` when Slack refuses the token."""
        self._session = ClientSession()
        try:
            self._current = await self._connect(down_since=None)
        except BaseException:
            await self._session.close()
            raise
        self._runner = asyncio.get_running_loop().create_task(self._run(), name="slack-socket")

    async def close(self) -> None:
        """Stop reading, let envelopes being stored be acknowledged, close the connection."""
        self._closed = True
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
        current, self._current = self._current, None
        if current is not None and current.reader is not None:
            current.reader.cancel()
            await asyncio.gather(current.reader, return_exceptions=True)
        if self._dispatches:
            await asyncio.wait(set(self._dispatches), timeout=ACK_DRAIN_S)
        if current is not None:
            await current.ws.close()
        if self._session is not None:
            await self._session.close()

    async def wait_failed(self) -> ConfigError:
        """Return once Slack has refused the link for good (the error names the fix)."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    def _fail(self, error: ConfigError) -> None:
        self.failure = error
        self._readiness.disconnected(PLATFORM)
        self._failed.set()

    # --- the connection loop

    async def _run(self) -> None:
        while not self._closed:
            current = self._current
            assert current is not None
            reason = await current.ended
            try:
                if reason in HANDOVER_REASONS:
                    logger.info("slack socket mode: %s, opening a new connection first", reason)
                    # The old connection keeps reading until the new one said hello.
                    new = await self._connect(down_since=None)
                    self._current = new
                    await self._retire(current)
                    continue
                if reason == "link_disabled":
                    await self._retire(current)
                    self._fail(
                        ConfigError(
                            "Slack disabled this app's Socket Mode connection (link_disabled):"
                            " turn Socket Mode on in the app's settings at api.slack.com/apps,"
                            " or run with --http"
                        )
                    )
                    return
                # Closed abruptly, a network error, or too_many_websockets (close first).
                down_since = time.monotonic()
                self._readiness.disconnected(PLATFORM)
                logger.info("slack socket mode: connection lost (%s), reconnecting", reason)
                await self._retire(current)
                self._current = await self._connect(down_since=down_since)
            except ConfigError as error:
                self._fail(error)
                return

    async def _retire(self, connection: _Connection) -> None:
        """Close ``connection`` once the envelopes it is storing were acknowledged on it
        (bounded by ``ACK_DRAIN_S``)."""
        if connection.dispatches and not connection.ws.closed:
            await asyncio.wait(set(connection.dispatches), timeout=ACK_DRAIN_S)
        await connection.ws.close()
        if connection.reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await connection.reader

    async def _connect(self, *, down_since: float | None) -> _Connection:
        """Open a connection, retrying forever with backoff; ``ConfigError`` if refused."""
        attempts = 0
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(_Retry),
            wait=self._wait,
            before_sleep=self._log_attempt,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                attempts += 1
                connection = await self._open()
        self._readiness.connected(PLATFORM)
        if down_since is not None:
            logger.info(
                "slack socket mode: connected again after %.1f s down (%d attempts)",
                time.monotonic() - down_since,
                attempts,
            )
        return connection

    @staticmethod
    def _log_attempt(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        wait_s = state.next_action.sleep if state.next_action is not None else 0.0
        logger.info(
            "slack socket mode: connection attempt %d failed (%s), next in %.1f s",
            state.attempt_number,
            error,
            wait_s,
        )

    async def _open(self) -> _Connection:
        """``apps.connections.open``, the websocket, its ``hello``; raises ``_Retry`` or
        ``ConfigError``."""
        try:
            opened = await self._client.apps_connections_open(app_token=self._app_token)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or exc.response.status_code)
            if error in REFUSED_TOKEN_ERRORS:
                raise ConfigError(
                    f"SLACK_APP_TOKEN was refused by Slack ({error}): create a new app-level"
                    " token with connections:write at api.slack.com/apps and set it"
                ) from None
            if error in REFUSED_APP_ERRORS:
                raise ConfigError(
                    f"Slack refuses this app's Socket Mode connection ({error}): check at"
                    " api.slack.com/apps that the app is installed in this workspace (or org),"
                    " Socket Mode is on and SLACK_APP_TOKEN has connections:write, or use"
                    " --http"
                ) from None
            raise _Retry(f"apps.connections.open: {error}") from None
        except (ClientError, OSError, TimeoutError) as exc:
            raise _Retry(f"apps.connections.open: {type(exc).__name__}") from None
        assert self._session is not None
        try:
            ws = await self._session.ws_connect(
                str(opened["url"]), heartbeat=PING_INTERVAL_S, max_msg_size=self.max_frame_bytes
            )
        except (ClientError, OSError, TimeoutError) as exc:
            raise _Retry(f"websocket: {type(exc).__name__} {exc}") from None
        self._numbers += 1
        connection = _Connection(ws, self._numbers)
        hello = asyncio.get_running_loop().create_future()
        connection.reader = asyncio.get_running_loop().create_task(
            self._read(connection, hello), name=f"slack-socket-{connection.number}"
        )
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                await asyncio.shield(hello)
        except TimeoutError:
            await self._retire(connection)
            raise _Retry("websocket: no hello") from None
        if not hello.result():
            await self._retire(connection)
            raise _Retry("websocket: closed before hello")
        self.connections += 1
        logger.debug("slack socket mode: connection %d open", connection.number)
        return connection

    # --- one connection

    async def _read(self, connection: _Connection, hello: asyncio.Future[bool]) -> None:
        try:
            async for message in connection.ws:
                if message.type == WSMsgType.ERROR:
                    logger.warning("slack socket mode: connection error: %s", message.data)
                    continue
                if message.type != WSMsgType.TEXT:
                    continue
                if len(message.data) > self.max_envelope_bytes:
                    await self._drop_large(connection, message.data)
                    continue
                try:
                    data = json.loads(message.data)
                except (ValueError, RecursionError):
                    logger.warning("slack socket mode: a frame that is not JSON was ignored")
                    continue
                if not isinstance(data, dict):
                    continue
                kind = data.get("type")
                if kind == "hello":
                    if not hello.done():
                        hello.set_result(True)
                elif kind == "disconnect":
                    connection.end(str(data.get("reason") or "unknown"))
                elif data.get("envelope_id"):
                    task = asyncio.get_running_loop().create_task(
                        self._dispatch(connection, data), name="slack-envelope"
                    )
                    self._dispatches.add(task)
                    task.add_done_callback(self._dispatches.discard)
                    connection.dispatches.add(task)
                    task.add_done_callback(connection.dispatches.discard)
        finally:
            if not hello.done():
                hello.set_result(False)
            connection.end("closed")

    async def _drop_large(self, connection: _Connection, frame: str) -> None:
        """A frame above :attr:`max_envelope_bytes`: acknowledged when its envelope id can be
        read (so that Slack does not send it again), never handled."""
        found = _ENVELOPE_ID.search(frame)
        logger.warning(
            "slack socket mode: a %d-byte frame (limit %d) was dropped%s",
            len(frame),
            self.max_envelope_bytes,
            f", envelope {found.group(1)} acknowledged" if found else " (no envelope id)",
        )
        if found:
            await self._ack(connection, {"envelope_id": found.group(1)})

    async def _ack(self, connection: _Connection, ack: dict[str, Any]) -> None:
        try:
            await connection.ws.send_str(json.dumps(ack))
        except (ClientError, ConnectionError, RuntimeError) as exc:
            logger.info(
                "slack envelope %s: its connection closed before the ack (%s), Slack redelivers it",
                ack.get("envelope_id"),
                type(exc).__name__,
            )

    async def _dispatch(self, connection: _Connection, envelope: dict[str, Any]) -> None:
        envelope_id = envelope.get("envelope_id")
        kind = envelope.get("type")
        if not isinstance(envelope_id, str):
            logger.warning("slack socket mode: an envelope id that is not a string was ignored")
            return
        reason = (
            inbound.problem(envelope.get("payload"), kind=str(kind))
            if kind in ENVELOPE_KINDS
            else None
        )
        if reason is not None:
            logger.warning("slack envelope %s dropped (acknowledged): %s", envelope_id, reason)
            await self._ack(connection, {"envelope_id": envelope_id})
            return
        request = SocketModeRequest.from_dict(envelope)
        if request is None:
            logger.warning("slack envelope %s dropped (acknowledged): no payload", envelope_id)
            await self._ack(connection, {"envelope_id": envelope_id})
            return
        try:
            response = await run_async_bolt_app(self._app, request)
        except Exception:  # the edge: Bolt's own error handler has run; keep reading
            logger.exception("slack envelope %s failed in Bolt", request.envelope_id)
            return
        if response.status != 200:
            logger.info(
                "slack envelope %s not acknowledged (status %d): Slack redelivers it",
                request.envelope_id,
                response.status,
            )
            return
        await self._ack(connection, ack_for(request.envelope_id, response))


@contextlib.asynccontextmanager
async def open_socket_mode(
    app: AsyncApp,
    *,
    client: AsyncWebClient,
    app_token: str,
    readiness: Readiness,
    backoff_s: float,
    backoff_max_s: float,
) -> AsyncIterator[SocketModeLink]:
    """A started :class:`SocketModeLink`, closed on exit. Raises ``ConfigError`` when Slack
    refuses the app token at start-up."""
    link = SocketModeLink(
        app=app,
        client=client,
        app_token=app_token,
        readiness=readiness,
        backoff_s=backoff_s,
        backoff_max_s=backoff_max_s,
    )
    await link.start()
    try:
        yield link
    finally:
        await link.close()
