"""The Discord :class:`core.streaming.reply.ReplySink`: one streamed answer in one channel or
thread.

``post`` sends a message (the first one as a reply to the user's message, without pinging
its author); ``edit`` edits one of them; ``status`` keeps the typing indicator alive while
Claude thinks and writes. Every send and edit carries ``allowed_mentions`` that ping nobody
(no ``@everyone``/``@here``, roles or users), whatever the answer says.

Errors, as :class:`core.streaming.reply.StreamedReply` expects them:

- discord.py waits out 429s itself (it sleeps ``retry_after`` and retries, five tries in
  all); a 429 that still escapes (``discord.RateLimited`` when the wait would pass the
  client's ``max_ratelimit_timeout``, or ``HTTPException`` with status 429 after the last
  try) becomes ``core.errors.RateLimited``;
- ``NotFound`` (message deleted, code 10008) or ``Forbidden`` on ``edit`` becomes
  ``EditFailed``: the streamer continues the answer in a new message;
- anything else is a platform error and propagates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
import discord

from core.errors import EditFailed, RateLimited

logger = logging.getLogger(__name__)

NO_MENTIONS = discord.AllowedMentions.none()
"""``{"parse": []}``: nobody is pinged, not even the author of the message replied to."""

TYPING_REFRESH_S = 8.0
"""Discord shows a typing indicator for about 10 s after ``POST /channels/{id}/typing``
(https://discord.com/developers/docs/resources/channel#trigger-typing-indicator)."""

DEFAULT_RETRY_AFTER_S = 1.0


def retry_after_s(error: discord.HTTPException | discord.RateLimited) -> float:
    """Seconds to wait after a 429: ``retry_after`` from discord.py, else the
    ``Retry-After`` header, else one second."""
    if isinstance(error, discord.RateLimited):
        return float(error.retry_after)
    header = error.response.headers.get("Retry-After") if error.response is not None else None
    try:
        return float(header) if header is not None else DEFAULT_RETRY_AFTER_S
    except ValueError:
        return DEFAULT_RETRY_AFTER_S


def partial_message(channel: discord.abc.Messageable, message_id: int) -> discord.PartialMessage:
    """A message of ``channel`` by id, to edit or delete without fetching it. Raises
    ``EditFailed`` for a channel kind that has no messages by id."""
    if isinstance(
        channel,
        discord.TextChannel
        | discord.Thread
        | discord.DMChannel
        | discord.VoiceChannel
        | discord.PartialMessageable,
    ):
        return channel.get_partial_message(message_id)
    raise EditFailed("cannot edit in this channel")


class DiscordSink:
    """Where one answer goes: ``channel`` (a text channel, thread or DM).

    ``reply_to``: the user's message; the first posted message replies to it (and does not
    fail if it was deleted meanwhile). ``on_post(message_id)`` is called for each posted
    message (the adapter maps answer messages to their conversation). ``reuse``: the id of
    a message an interrupted answer left: the first ``post`` edits it instead of sending a
    new one. Call :meth:`close` when the reply is over, whatever happened, to stop the
    typing indicator.
    """

    def __init__(
        self,
        channel: discord.abc.Messageable,
        *,
        reply_to: discord.Message | None = None,
        on_post: Callable[[int], None] | None = None,
        typing_refresh_s: float = TYPING_REFRESH_S,
        reuse: int | None = None,
    ) -> None:
        self._channel = channel
        self._reply_to = reply_to
        self._on_post = on_post
        self._typing_refresh_s = typing_refresh_s
        self._messages: dict[str, discord.Message] = {}
        self._typing: asyncio.Task[None] | None = None
        self._reuse = reuse

    async def post(self, *, text: str) -> str:
        """Send a message; returns its id. Raises ``RateLimited`` on an escaped 429."""
        reuse = self._reuse
        try:
            if reuse is not None:
                partial = partial_message(self._channel, reuse)
                sent = await partial.edit(content=text, allowed_mentions=NO_MENTIONS)
            elif self._reply_to is not None and not self._messages:
                sent = await self._channel.send(
                    text,
                    reference=self._reply_to.to_reference(fail_if_not_exists=False),
                    allowed_mentions=NO_MENTIONS,
                )
            else:
                sent = await self._channel.send(text, allowed_mentions=NO_MENTIONS)
        except discord.RateLimited as exc:
            raise RateLimited(retry_after_s(exc)) from exc
        except (discord.NotFound, discord.Forbidden) as exc:
            if reuse is None:
                raise
            logger.info("could not reuse message %s: HTTP %s", reuse, exc.status)
            self._reuse = None
            return await self.post(text=text)  # deleted meanwhile: a new message
        except discord.HTTPException as exc:
            if exc.status == 429:
                raise RateLimited(retry_after_s(exc)) from exc
            raise
        self._reuse = None
        handle = str(sent.id)
        self._messages[handle] = sent
        if self._on_post is not None:
            self._on_post(sent.id)
        return handle

    async def edit(self, *, handle: str, text: str) -> None:
        """Replace a posted message's content. ``EditFailed`` when it is gone or forbidden."""
        message = self._messages.get(handle)
        if message is None:
            raise EditFailed("unknown message")
        try:
            self._messages[handle] = await message.edit(content=text, allowed_mentions=NO_MENTIONS)
        except discord.RateLimited as exc:
            raise RateLimited(retry_after_s(exc)) from exc
        except (discord.NotFound, discord.Forbidden) as exc:
            raise EditFailed(f"HTTP {exc.status} code {exc.code}") from exc
        except discord.HTTPException as exc:
            if exc.status == 429:
                raise RateLimited(retry_after_s(exc)) from exc
            raise

    async def status(self, *, text: str | None) -> None:
        """Start (``text``) or stop (``None``) the typing indicator; never raises for it."""
        if text is None:
            await self.close()
        elif self._typing is None:
            self._typing = asyncio.create_task(self._keep_typing(), name="discord-typing")

    async def close(self) -> None:
        """Stop the typing indicator (safe to call twice)."""
        task, self._typing = self._typing, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})  # the caller's own cancellation still propagates
            if not task.cancelled():
                task.exception()

    async def _keep_typing(self) -> None:
        while True:
            try:
                await self._channel.typing()
            except (discord.HTTPException, discord.RateLimited, aiohttp.ClientError) as exc:
                logger.debug("typing indicator failed: %s", type(exc).__name__)
            await asyncio.sleep(self._typing_refresh_s)
