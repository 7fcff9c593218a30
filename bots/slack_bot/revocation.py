"""A revoked bot token stops the Slack bot with one line, rather than failing every answer.

Slack says the bot token no longer works in two ways (docs.slack.dev): the events
``tokens_revoked`` (``event.tokens.bot`` lists the bot users whose tokens were revoked) and
``app_uninstalled``, and Web API errors on calls made with it: ``invalid_auth``,
``token_revoked``, ``account_inactive``, ``not_authed``. No retry fixes either, so
:class:`BotTokenWatch` records the first one as a :class:`~core.errors.ConfigError` naming
the fix (reinstall the app, set the new ``SLACK_BOT_TOKEN``); ``run_slack`` waits for it
beside SIGTERM and exits 1 with that line, in Socket Mode and over HTTP, so a process manager
restarts it. Nothing stored is lost: a message already stored whose answer failed stays
unanswered in the store and the next start-up answers it (:mod:`core.chat.intake`).

The Web API errors are seen by an ``AsyncRetryHandler`` that never retries: slack_sdk (3.48,
``web/async_internal_utils.py``) shows every response to each client's retry handlers, so one
handler in the clients' shared list sees every call the bot token makes, wherever its error is
caught later. Calls made with another token (``apps.connections.open`` with the app token,
handled by :mod:`bots.slack_bot.socket_mode`) are not its business.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from core.errors import ConfigError

logger = logging.getLogger(__name__)

REFUSED_BOT_TOKEN_ERRORS = frozenset(
    {"invalid_auth", "token_revoked", "account_inactive", "not_authed"}
)
"""Web API errors that mean the bot token no longer works (docs.slack.dev, "Errors")."""
REVOKED_EVENTS = ("tokens_revoked", "app_uninstalled")


def revoked(reason: str) -> ConfigError:
    """The one line that names the fix for a bot token Slack no longer takes."""
    return ConfigError(
        f"SLACK_BOT_TOKEN no longer works ({reason}): reinstall the app to the workspace at"
        " api.slack.com/apps (Install App) and set its new Bot User OAuth Token (xoxb-...) as"
        " SLACK_BOT_TOKEN"
    )


class BotTokenWatch(AsyncRetryHandler):
    """Set once Slack refuses or revokes the bot token; :meth:`wait` returns the error.

    A retry handler for the bot's Web API clients (it never asks for a retry) and, through
    :meth:`register`, the Bolt listener of ``tokens_revoked`` / ``app_uninstalled``.
    ``bot_user_id`` / ``bot_id``: the bot's own ids (``auth.test``), which a
    ``tokens_revoked`` event must name to concern this bot.
    """

    def __init__(self, *, bot_token: str, bot_user_id: str, bot_id: str | None) -> None:
        super().__init__(max_retry_count=0)
        self._authorization = f"Bearer {bot_token}"
        self._own_ids = {bot_user_id} | ({bot_id} if bot_id else set())
        self._failed = asyncio.Event()
        self.failure: ConfigError | None = None

    def refused(self, reason: str) -> None:
        """Record that the bot token stopped working (the first reason wins)."""
        if self.failure is not None:
            return
        self.failure = revoked(reason)
        logger.warning("slack bot token no longer works (%s): stopping", reason)
        self._failed.set()

    async def wait(self) -> ConfigError:
        """Return once the bot token stopped working."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    # --- the Web API: a retry handler that only looks

    async def can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is not None and isinstance(response.body, dict):
            code = response.body.get("error")
            if code in REFUSED_BOT_TOKEN_ERRORS and self._with_bot_token(request):
                method = request.url.rsplit("/", 1)[-1]
                self.refused(f"{code} on {method}")
        return False

    def _with_bot_token(self, request: HttpRequest) -> bool:
        sent = request.headers.get("Authorization") or request.headers.get("authorization")
        if sent is None:  # no token at all: not_authed on a call that should carry ours
            return True
        return self._authorization in sent

    # --- the events

    def register(self, app: AsyncApp) -> None:
        """Listen for ``tokens_revoked`` and ``app_uninstalled`` (acknowledged, then stop).
        Register before any catch-all event listener: Bolt runs the first that matches."""
        app.event("tokens_revoked")(self.on_tokens_revoked)
        app.event("app_uninstalled")(self.on_app_uninstalled)

    async def on_tokens_revoked(self, event: dict[str, Any]) -> None:
        tokens = event.get("tokens")
        bots = tokens.get("bot") if isinstance(tokens, dict) else None
        if isinstance(bots, list) and self._own_ids & {str(b) for b in bots}:
            self.refused("tokens_revoked event")
        else:
            logger.info("slack tokens_revoked for user tokens only: the bot token still works")

    async def on_app_uninstalled(self) -> None:
        self.refused("app_uninstalled event")
