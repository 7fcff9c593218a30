"""The Slack adapter (``selfmind slack``): mentions, DMs and threads answered with memory.

A thin layer over the core built on slack_bolt's ``AsyncApp``; the composition root is
:func:`open_slack_bot` (used by :func:`run_slack` and by the tests): it checks the settings,
asks ``auth.test`` who the bot is, opens the runtime (store, Claude, reflector) and builds
one :class:`SlackBot`:

- :mod:`bots.slack_bot.events`: which messages are answered, exactly once, and how;
- :mod:`bots.slack_bot.commands`: the slash commands, their buttons and the ephemeral
  "I'll remember" notes; :mod:`bots.slack_bot.cleanup`: ``/memories cleanup``;
- :mod:`bots.slack_bot.sink`: the streamed reply's posts and edits.

Every event is acknowledged once its message is stored (never before: an event whose intake
fails gets HTTP 500 or no Socket Mode ack, so Slack redelivers it), commands and clicks at
once; the work runs in a background task that shutdown waits for. Modes: Socket Mode
(``SLACK_APP_TOKEN``, no public URL; the connection is kept by
:mod:`bots.slack_bot.socket_mode`) or HTTP
(``SLACK_SIGNING_SECRET``; events, commands and interactions at ``POST /slack/events``, a
health check at ``GET /healthz``). ``SLACK_API_URL`` is the Web API base URL. SIGTERM stops
intake, lets answers in flight finish and drains reflections, within
``SELFMIND_SHUTDOWN_TIMEOUT_S`` in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import ClientError, ClientSession, web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack_bot import inbound
from bots.slack_bot.assistant import SlackAssistant
from bots.slack_bot.cleanup import SlackCleanup
from bots.slack_bot.commands import SlackCommands, send_export
from bots.slack_bot.events import BotIdentity, SlackConversations
from bots.slack_bot.feedback import SlackFeedback
from bots.slack_bot.home import SlackHome
from bots.slack_bot.revocation import BotTokenWatch
from bots.slack_bot.sink import slack_error
from bots.slack_bot.socket_mode import SocketModeLink, open_socket_mode
from core.chat.intake import Intake
from core.errors import ConfigError, IntakeFailed
from core.health import healthz_handler
from core.memory.reflection import ReflectionResult
from core.runtime import Runtime, open_runtime
from core.settings import DEFAULT_SLACK_API_URL, Settings, missing
from core.types import Turn

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]
Authorize = Callable[[str | None, str | None, str | None], Awaitable[AuthorizeResult]]

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"


def retry_num(headers: dict[str, Sequence[str]]) -> int:
    """``X-Slack-Retry-Num`` as an int; Bolt sets ``['0']`` on every first delivery in
    Socket Mode, so only a value above 0 marks a retry."""
    values = headers.get("x-slack-retry-num") or ["0"]
    try:
        return int(values[0])
    except (ValueError, IndexError):
        return 0


def fixed_authorize(identity: BotIdentity, token: str | None) -> Authorize:
    """Bolt's ``authorize`` from the start-up ``auth.test`` (one workspace, no call per
    request). A closure: Bolt passes arguments by the function's own parameter names."""

    async def authorize(
        enterprise_id: str | None, team_id: str | None, user_id: str | None
    ) -> AuthorizeResult:
        return AuthorizeResult(
            enterprise_id=enterprise_id,
            team_id=team_id or identity.team_id,
            bot_user_id=identity.user_id,
            bot_id=identity.bot_id,
            bot_token=token,
            user_id=user_id,
        )

    return authorize


def _drop_client_token_warning(record: logging.LogRecord) -> bool:
    """Logging filter: drop bolt's "As you gave `client` as well, `token` will be unused."."""
    return record.getMessage() != warning_client_prioritized_and_token_skipped()


class SlackBot:
    """One process's Slack app over one runtime: Bolt listeners, background tasks, HTTP.

    ``client`` makes every Web API call but the answers' own posts and edits (it retries
    429s); ``stream_client`` makes those (it does not, so the streamed reply waits and
    coalesces instead). ``app`` is the Bolt app; :meth:`web_app` serves it over HTTP.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        runtime: Runtime,
        identity: BotIdentity,
        client: AsyncWebClient,
        stream_client: AsyncWebClient,
        signing_secret: str | None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.identity = identity
        self.client = client
        self._token = client.token
        self._tasks: set[asyncio.Task[None]] = set()
        # Sees every Web API response of the bot token (the Bolt app's client shares the list).
        self.token_watch = BotTokenWatch(
            bot_token=client.token or "", bot_user_id=identity.user_id, bot_id=identity.bot_id
        )
        for web_client in (client, stream_client):
            web_client.retry_handlers.append(self.token_watch)
        self.conversations = SlackConversations(
            settings=settings,
            loop=runtime.loop,
            intake=Intake(loop=runtime.loop),
            identity=identity,
            client=client,
            stream_client=stream_client,
        )
        self.home = SlackHome(
            service=runtime.service,
            client=client,
            install_id=identity.install_id,
            spawn=self.spawn,
            send_export=functools.partial(send_export, runtime.service, client),
            controls=runtime.loop.controls,
            team_id=identity.team_id,
        )
        self.commands = SlackCommands(
            service=runtime.service,
            client=client,
            spawn=self.spawn,
            controls=runtime.loop.controls,
            cleanup=SlackCleanup(runtime.reviews),
            install_id=identity.install_id,
            after_change=self.home.refresh,
            team=runtime.loop.team,
        )
        self.assistant = SlackAssistant(
            service=runtime.service,
            store=runtime.store,
            client=client,
            install_id=identity.install_id,
            controls=runtime.loop.controls,
        )
        self._verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self.app = self._build_app(signing_secret)

    async def on_learned(self, result: ReflectionResult) -> None:
        """After a reflection that stored something: the note (if on), the Home tab."""
        if self.settings.slack_memory_notes:
            await self.commands.memory_note(result)
        await self.home.refresh(result.turn.user_key or "")

    async def on_app_home_opened(self, event: JsonDict, body: JsonDict) -> None:
        """``app_home_opened``: the Home tab shows the memory page, the Messages tab greets
        (both checked against the allow-lists with the event's workspace)."""
        user, team = str(event.get("user") or ""), str(body.get("team_id") or "")
        if event.get("tab") == "home" and user:
            self.spawn(self.home.publish(user, team=team), "slack-home")
        elif event.get("tab") == "messages":
            work = self.assistant.on_app_home_opened(event, team=team)
            self.spawn(work, "slack-messages-tab")

    async def on_thread_started(self, event: JsonDict, body: JsonDict) -> None:
        work = self.assistant.on_thread_started(event, team=str(body.get("team_id") or ""))
        self.spawn(work, "slack-assistant-thread")

    def _build_app(self, signing_secret: str | None) -> AsyncApp:
        # Bolt reads SLACK_BOT_TOKEN from the environment itself and, given a client too,
        # warns that it goes unused (it must: ours carries the URL, session and retries).
        bolt_logger = logging.getLogger("slack_bolt.selfmind")
        bolt_logger.addFilter(_drop_client_token_warning)
        # Its level stays NOTSET: Bolt copies it onto a logger named after the app
        # ("selfmind") at every request, and its own debug lines per middleware are cheap.
        app = AsyncApp(
            name="selfmind",
            # Acknowledge after the listener: event listeners store the message first and
            # return at once (answers and commands run in background tasks).
            process_before_response=True,
            signing_secret=signing_secret or "",
            request_verification_enabled=signing_secret is not None,
            client=AsyncWebClient(
                base_url=self.client.base_url,
                session=self.client.session,
                retry_handlers=self.client.retry_handlers,
                logger=self.client.logger,
            ),
            authorize=fixed_authorize(self.identity, self._token),
            logger=bolt_logger,
        )
        app.event("app_mention")(self.on_event)
        app.event("message")(self.on_event)
        app.event("app_home_opened")(self.on_app_home_opened)
        app.event("assistant_thread_started")(self.on_thread_started)
        self.home.register(app)
        self.token_watch.register(app)
        app.event(re.compile(".*"))(self.on_other_event)  # acked, so never redelivered
        self.commands.register(app)
        SlackFeedback(
            self.runtime.store,
            install_id=self.identity.install_id,
            controls=self.runtime.loop.controls,
        ).register(app)
        app.error(self.on_error)
        return app

    async def on_error(self, error: Exception) -> None:
        """Bolt's error handler: the request is answered HTTP 500 (HTTP mode) or left
        unacknowledged (Socket Mode), so Slack redelivers it (``X-Slack-Retry-Num`` /
        ``retry_attempt``); Slack retries an event three times."""
        if isinstance(error, IntakeFailed):
            logger.warning("slack request not acknowledged, Slack will redeliver it: %s", error)
        else:
            logger.error("slack request failed", exc_info=error)

    async def on_event(self, body: JsonDict, request: AsyncBoltRequest) -> None:
        """Bolt listener: filter and store the message, then answer in the background."""
        message = self.conversations.parse(body)
        if message is None:
            return
        retry = retry_num(request.headers)
        if retry:
            logger.info("slack event %s is retry %d", message.event_id, retry)
        # The app acknowledges after this listener returns (process_before_response): the
        # message is stored first, and only the answering runs after the acknowledgement.
        # IntakeFailed (not stored) propagates: no acknowledgement, Slack redelivers.
        work = await self.conversations.receive(message)
        if work is not None:
            self.spawn(work, f"slack-event-{message.event_id}")

    async def on_other_event(self, body: JsonDict) -> None:
        event = cast(JsonDict, body.get("event") or {})
        logger.debug("ignored slack event type %s", event.get("type"))

    async def recover(self, turns: list[Turn]) -> None:
        """Answer messages a crash left unanswered (claimed once, across replicas)."""
        for turn in turns:
            work = await self.conversations.recover(turn)
            if work is not None:
                self.spawn(work, f"slack-recover-{turn.id}")

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` in a task that shutdown waits for."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def busy(self) -> int:
        """Background tasks running (answers, commands)."""
        return len(self._tasks)

    async def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no background task runs; False if ``timeout_s`` passed first."""
        try:
            async with asyncio.timeout(timeout_s):
                while self._tasks:
                    await asyncio.wait(set(self._tasks))
        except TimeoutError:
            return False
        return True

    async def shutdown(self, timeout_s: float) -> None:
        """Let answers and commands in flight finish, then drain reflections; both bounded
        by ``timeout_s`` in all. Answers still running then are cancelled."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        if self._tasks:
            logger.info("shutdown: waiting for %d answers and commands", len(self._tasks))
        if not await self.wait_idle(timeout_s):
            logger.warning("shutdown: cancelling %d unfinished answers", len(self._tasks))
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        remaining = max(0.0, deadline - asyncio.get_running_loop().time())
        await self.runtime.loop.shutdown(remaining)  # unfinished reflections stay pending

    # --- HTTP mode

    def web_app(self) -> web.Application:
        """The aiohttp app: ``POST /slack/events`` (events, commands, interactions; signed)
        and ``GET /healthz``. Bodies up to :data:`bots.slack_bot.inbound.MAX_PAYLOAD_BYTES`
        are read, as Socket Mode frames are (aiohttp's 1 MiB default refused some real
        events with 413, so Slack retried them three times and gave up); larger get 413."""
        app = web.Application(client_max_size=inbound.MAX_PAYLOAD_BYTES)
        healthz = healthz_handler(self.runtime.readiness)
        app.add_routes([web.post(EVENTS_PATH, self._http_events), web.get(HEALTH_PATH, healthz)])
        return app

    async def _http_events(self, request: web.Request) -> web.Response:
        """Check the signature on the raw bytes before anything parses them: an unsigned or
        forged request gets 401 whatever its body or headers (bad JSON, bad form encoding,
        invalid UTF-8, a non-numeric or 5,000-digit timestamp, a non-ASCII signature), logged
        in one line at DEBUG. A signed request whose payload the handlers cannot read
        (:mod:`bots.slack_bot.inbound`) gets 400, logged in one line at INFO."""
        raw = await request.read()
        stamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        try:
            body = raw.decode("utf-8")  # Slack signs UTF-8 text; anything else is not Slack's
        except UnicodeDecodeError:
            body = None
        if self._verifier is not None and not (
            body is not None
            and inbound.signature_headers_ok(stamp, signature)
            and self._verifier.is_valid(body=body, timestamp=stamp, signature=signature)
        ):
            logger.debug("slack request refused: bad or missing signature")
            return web.Response(status=401, text="")
        if body is None:
            logger.debug("slack request refused: body is not UTF-8")
            return web.Response(status=400, text="")
        try:
            reason = inbound.problem(inbound.parse_http_body(body, request.content_type))
        except (ValueError, RecursionError):
            reason = "body is neither JSON nor a form"
        if reason is not None:
            logger.info("slack request refused (400): %s", reason)
            return web.Response(status=400, text="")
        bolt_request = AsyncBoltRequest(
            body=body,
            query=request.query_string,
            headers=cast(dict[str, str | Sequence[str]], dict(request.headers)),
        )
        response = await self.app.async_dispatch(bolt_request)
        return await to_aiohttp_response(response)


@dataclass(frozen=True)
class SlackSecrets:
    """The checked secrets for one mode."""

    bot_token: str
    app_token: str | None
    signing_secret: str | None


def check_settings(settings: Settings, *, http: bool) -> SlackSecrets:
    """The secrets the mode needs (and the Anthropic key, before any network); ``ConfigError``
    naming the first one missing."""
    if settings.slack_bot_token is None or not settings.slack_bot_token.get_secret_value():
        raise missing(
            "SLACK_BOT_TOKEN",
            "the Bot User OAuth Token (xoxb-...) of the app installed to your workspace"
            " (docs/slack.md)",
        )
    bot_token = settings.slack_bot_token.get_secret_value()
    if http:
        secret = settings.slack_signing_secret
        if secret is None or not secret.get_secret_value():
            raise missing("SLACK_SIGNING_SECRET", "the app's Signing Secret (HTTP mode needs it)")
        settings.require_model_key()
        return SlackSecrets(bot_token, None, secret.get_secret_value())
    app_token = settings.slack_app_token
    if app_token is None or not app_token.get_secret_value():
        raise missing(
            "SLACK_APP_TOKEN",
            "an app-level token (xapp-...: Socket Mode needs it; or run with --http)",
        )
    settings.require_model_key()
    return SlackSecrets(bot_token, app_token.get_secret_value(), None)


def web_clients(
    settings: Settings, token: str, session: ClientSession
) -> tuple[AsyncWebClient, AsyncWebClient]:
    """(client, stream_client) for ``SLACK_API_URL`` over one shared HTTP session (kept-alive
    connections): the first retries 429s (twice, after ``Retry-After``), the second leaves
    them to the streamed reply."""
    url = settings.slack_api_url
    base_url = url if url.endswith("/") else url + "/"
    logger = sdk_logger()
    client = AsyncWebClient(
        token=token,
        base_url=base_url,
        session=session,
        logger=logger,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(),
            AsyncRateLimitErrorRetryHandler(max_retry_count=2),
        ],
    )
    stream_client = AsyncWebClient(
        token=token,
        base_url=base_url,
        session=session,
        logger=logger,
        retry_handlers=[AsyncConnectionErrorRetryHandler()],
    )
    return client, stream_client


def sdk_logger() -> logging.Logger:
    """The logger our Slack web clients log to, with its level set explicitly.

    slack_sdk decides whether to build its debug lines with ``logger.level <= DEBUG``, not
    ``isEnabledFor``: on a logger left at ``NOTSET`` (0) it formats every request's params,
    headers and response body, then drops the line. Setting the level it would inherit
    anyway (``slack_sdk``'s effective level, after :func:`core.logs.configure_logging`)
    keeps the same lines and skips that work at INFO (bench/turn_cpu.py: about 40 us less
    per call).
    """
    log = logging.getLogger("slack_sdk.web.selfmind")
    log.setLevel(logging.getLogger("slack_sdk").getEffectiveLevel())
    return log


async def authenticate(client: AsyncWebClient, api_url: str) -> BotIdentity:
    """``auth.test``: the bot's identity; ``ConfigError`` naming the setting at fault."""
    try:
        auth = await client.auth_test()
    except SlackApiError as exc:
        raise ConfigError(f"SLACK_BOT_TOKEN was refused by Slack ({slack_error(exc)})") from None
    except (ClientError, OSError, TimeoutError) as exc:
        # Name SLACK_API_URL only when the user pointed it somewhere; else it is the network.
        setting = "SLACK_API_URL: " if api_url != DEFAULT_SLACK_API_URL else ""
        raise ConfigError(
            f"{setting}cannot reach Slack at {api_url} ({type(exc).__name__}):"
            " check the network connection"
        ) from None
    return BotIdentity(
        team_id=str(auth["team_id"]),
        user_id=str(auth["user_id"]),
        bot_id=str(auth["bot_id"]) if auth.get("bot_id") else None,
        enterprise_id=str(auth["enterprise_id"]) if auth.get("enterprise_id") else None,
        org_install=bool(auth.get("is_enterprise_install")),
    )


@dataclass
class RunningSlackBot:
    """A started bot: ``port`` is the HTTP port (None in Socket Mode), ``link`` the Socket
    Mode connection."""

    bot: SlackBot
    runtime: Runtime
    port: int | None
    link: SocketModeLink | None = None
    """The Socket Mode connection (None over HTTP)."""

    @property
    def events_url(self) -> str:
        """The local URL Slack's HTTP requests go to (HTTP mode)."""
        return f"http://127.0.0.1:{self.port}{EVENTS_PATH}"


@contextlib.asynccontextmanager
async def open_slack_bot(
    settings: Settings, *, db_url: str, http: bool = False, port: int | None = None
) -> AsyncIterator[RunningSlackBot]:
    """Check the settings, open the runtime, start receiving; on exit stop receiving, finish
    the answers in flight and drain reflections (bounded by ``shutdown_timeout_s``).

    ``port`` (HTTP mode) defaults to ``SELFMIND_SLACK_HTTP_PORT``; 0 picks a free one.
    Raises ``ConfigError`` naming a missing or refused setting.
    """
    secrets = check_settings(settings, http=http)
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(ClientSession())
        client, stream_client = web_clients(settings, secrets.bot_token, session)
        identity = await authenticate(client, settings.slack_api_url)
        logger.info("slack identity: team=%s bot_user=%s", identity.team_id, identity.user_id)
        unanswered: list[Turn] = []

        async def find_unanswered(rt: Runtime) -> None:
            # Before reflections resume: messages a crash left without an answer.
            if rt.loop is not None:
                intake = Intake(loop=rt.loop)
                # Every workspace of an org-wide install: conversation keys carry install_id.
                prefix = f"slack:{identity.install_id}:"
                unanswered.extend(await intake.unanswered(conversation_prefix=prefix))

        rt = await stack.enter_async_context(
            open_runtime(
                settings,
                db_url=db_url,
                require_model=True,
                before_start=find_unanswered,
                start=False,
                serve_health=True,
                migrate=True,  # a bot's start applies pending migrations, each logged by name
            )
        )
        bot = SlackBot(
            settings=settings,
            runtime=rt,
            identity=identity,
            client=client,
            stream_client=stream_client,
            signing_secret=secrets.signing_secret,
        )
        await rt.start(on_learned=bot.on_learned)
        try:
            if http:
                async with _serve_http(bot, settings.slack_http_host, port) as bound:
                    logger.info("slack bot listening on http port %d", bound)
                    rt.readiness.connected("slack")
                    await bot.recover(unanswered)
                    yield RunningSlackBot(bot, rt, bound)
            else:
                assert secrets.app_token is not None
                async with _socket_mode(bot, secrets.app_token) as link:
                    logger.info("slack bot connected in socket mode")
                    await bot.recover(unanswered)
                    yield RunningSlackBot(bot, rt, None, link)
        finally:
            rt.readiness.disconnected("slack")  # not ready while draining
            await bot.shutdown(settings.shutdown_timeout_s)


@contextlib.asynccontextmanager
async def _serve_http(bot: SlackBot, host: str, port: int | None) -> AsyncIterator[int]:
    # Requests are acknowledged at once, so 3 s (Slack's own ack limit) is plenty to finish.
    runner = web.AppRunner(
        bot.web_app(), access_log=None, handle_signals=False, shutdown_timeout=3.0
    )
    await runner.setup()
    try:
        chosen = bot.settings.slack_http_port if port is None else port
        try:
            await web.TCPSite(runner, host, chosen).start()
        except OSError as exc:
            raise ConfigError(
                f"SELFMIND_SLACK_HTTP_PORT: cannot listen on {chosen}: {exc}"
            ) from None
        bound = runner.addresses[0][1]
        yield int(bound)
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def _socket_mode(bot: SlackBot, app_token: str) -> AsyncIterator[SocketModeLink]:
    # The link marks readiness itself: connected on hello, disconnected while it reconnects.
    async with open_socket_mode(
        bot.app,
        client=bot.client,
        app_token=app_token,
        readiness=bot.runtime.readiness,
        backoff_s=bot.settings.reconnect_backoff_s,
        backoff_max_s=bot.settings.reconnect_backoff_max_s,
    ) as link:
        yield link


async def _until_stopped(stop: asyncio.Event, running: RunningSlackBot) -> ConfigError | None:
    """Wait for SIGTERM/SIGINT, or for Slack to refuse the Socket Mode link or the bot token
    for good (returned)."""
    link, watch = running.link, running.bot.token_watch
    waits: list[asyncio.Task[Any]] = [
        asyncio.ensure_future(stop.wait()),
        asyncio.ensure_future(watch.wait()),
    ]
    if link is not None:
        waits.append(asyncio.ensure_future(link.wait_failed()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
    return (link.failure if link is not None else None) or watch.failure


async def run_slack(
    settings: Settings, *, db_url: str, http: bool = False, port: int | None = None
) -> int:
    """Run the Slack bot until SIGTERM or SIGINT; returns the exit code (0).

    Raises ``ConfigError`` (one line naming the setting) when it cannot start, or when Slack
    refuses the Socket Mode link for good (``link_disabled``, a revoked app token) or the bot
    token (:mod:`bots.slack_bot.revocation`).
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        async with open_slack_bot(settings, db_url=db_url, http=http, port=port) as running:
            failure = await _until_stopped(stop, running)
            logger.info("slack bot stopping: %d answers in flight", running.bot.busy)
            if failure is not None:
                raise failure  # one line naming the fix; exit 1, a process manager restarts
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    logger.info("slack bot stopped")
    return 0
