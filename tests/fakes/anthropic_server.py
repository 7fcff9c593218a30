"""A local fake of the Anthropic Messages API (``POST /v1/messages``) on aiohttp.

The real ``anthropic.AsyncAnthropic`` client talks to it over a real socket::

    async with running_fake_anthropic() as fake:
        client = AsyncAnthropic(base_url=fake.base_url, api_key="test-key")
        fake.enqueue(Reply(text="Hello!", thinking="The user greets me."))
        fake.enqueue(rate_limited(), kind="extract")
        ...
        assert fake.requests[0].body["thinking"] == {"type": "adaptive"}

As a separate process (benchmarks)::

    python -m tests.fakes.anthropic_server --port 0 [--chunk-size 8] [--chunk-delay-s 0.01]
        [--first-token-delay-s 0.2] [--api-key KEY] [--responder package.module:function]

prints its base URL (``http://127.0.0.1:PORT``) on one line and serves until SIGTERM or
SIGINT. Out of process it is scripted over HTTP: ``POST /_fake/enqueue``
(``{"reply": {Reply fields}, "kind": "chat"|"extract"|"any", "times": 1}``),
``GET /_fake/requests`` (recorded bodies), ``GET /_fake/totals``, ``POST /_fake/reset``.

Which reply a request gets: the queue of its kind (``chat``: no ``output_config.format``;
``extract``: with one), then the ``any`` queue, then ``responder(body)`` if set (sync or
async; returns a :class:`Reply`, a ``str`` of text, or a ``dict``/``list`` sent as JSON
text), then the default: an echo of the last user message for chat (with a thinking block
when thinking is on), a minimal schema-valid JSON object for extraction.

Like the real API it answers 401 ``authentication_error`` without a key (SDK 2.14 sends it
as ``Authorization: Bearer KEY``; ``x-api-key: KEY`` is accepted too), or with a wrong one
when ``api_key`` is set, and 400 ``invalid_request_error`` for: a
missing ``anthropic-version`` header, a non-positive ``max_tokens``, empty ``messages``, a
bad ``thinking`` config, more than 4 ``cache_control`` breakpoints, and structured-output
schemas the API refuses (see :data:`REFUSED_SCHEMA_KEYWORDS`; also ``minItems`` other than
0 or 1, string ``format`` outside :data:`SUPPORTED_STRING_FORMATS`, and any object schema
without ``"additionalProperties": false``), and files the API refuses (images, PDFs and
text documents past the documented limits: :mod:`tests.fakes.anthropic_files`); a body over
32 MB gets 413 ``request_too_large``.

``POST /v1/messages/count_tokens`` answers ``{"input_tokens": N}``, N being what
``/v1/messages`` counts as the same body's prompt (:func:`prompt_tokens`).

Usage is deterministic: tokens are ``ceil(len(text) / 4)``, plus what files cost
(:func:`tests.fakes.anthropic_files.file_tokens`: they grow with the image's pixels, the
PDF's pages and bytes, the text's length). Prompt caching: each system
block carrying ``cache_control`` is a breakpoint; the longest breakpoint prefix (same model,
same block texts) seen in an earlier successful request counts as ``cache_read_input_tokens``,
the rest of the prefix up to the last breakpoint as ``cache_creation_input_tokens``, the
remainder as ``input_tokens``. As on the real API, a breakpoint whose prefix is shorter than
``min_cache_tokens`` (default :data:`MIN_CACHE_TOKENS`) is silently not cached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import itertools
import json
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from aiohttp import web

from tests.fakes.anthropic_files import MAX_REQUEST_BYTES, check_files, file_tokens

Kind = Literal["chat", "extract"]
Responder = Callable[[dict[str, Any]], Any]
"""``responder(body) -> ReplyLike`` or an awaitable of one."""

REFUSED_SCHEMA_KEYWORDS = frozenset(
    {
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "patternProperties",
    }
)
"""JSON Schema keywords the fake refuses in ``output_config.format.schema`` (400)."""

SUPPORTED_STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
"""String formats accepted in structured-output schemas (as in ``anthropic.transform_schema``)."""


@dataclass(frozen=True)
class Reply:
    """One scripted answer or fault.

    ``status != 200`` sends an error body ``{"type": "error", "error": {"type": error_type,
    "message": error_message}}`` with ``retry-after: retry_after_s`` when set. ``delay_s``
    waits before anything is sent. Streaming: ``first_token_delay_s``, ``chunk_size``
    (characters per delta) and ``chunk_delay_s`` override the server's settings;
    ``cut_after_chunks`` stops after that many text deltas, before ``message_delta`` and
    ``message_stop``: either an ``event: error`` (when ``stream_error_type`` is set), or the
    body simply ends (``cut_mode="eof"``), or the connection is dropped (``"abort"``). A
    non-streaming request with ``cut_after_chunks`` has its connection dropped unanswered.
    """

    text: str = ""
    thinking: str | None = None
    stop_reason: str = "end_turn"
    status: int = 200
    error_type: str = "api_error"
    error_message: str = "Internal server error"
    retry_after_s: float | None = None
    delay_s: float = 0.0
    first_token_delay_s: float | None = None
    chunk_size: int | None = None
    chunk_delay_s: float | None = None
    cut_after_chunks: int | None = None
    cut_mode: Literal["eof", "abort"] = "eof"
    stream_error_type: str | None = None
    stream_error_message: str = "Overloaded"


ReplyLike: TypeAlias = Reply | str | dict[str, Any] | list[Any]
"""A :class:`Reply`, or a ``str`` of answer text, or a ``dict``/``list`` sent as JSON text."""


def rate_limited(retry_after_s: float = 0.01) -> Reply:
    """A 429 ``rate_limit_error`` with a small ``retry-after`` (seconds; the SDK obeys it)."""
    return Reply(
        status=429,
        error_type="rate_limit_error",
        error_message="Number of request tokens has exceeded your per-minute rate limit",
        retry_after_s=retry_after_s,
    )


def overloaded(retry_after_s: float | None = None) -> Reply:
    """A 529 ``overloaded_error``."""
    return Reply(
        status=529,
        error_type="overloaded_error",
        error_message="Overloaded",
        retry_after_s=retry_after_s,
    )


def server_error(retry_after_s: float | None = None) -> Reply:
    """A 500 ``api_error``."""
    return Reply(status=500, error_type="api_error", retry_after_s=retry_after_s)


def cut_stream(
    text: str, *, after_chunks: int, mode: Literal["eof", "abort"] = "eof", chunk_size: int = 4
) -> Reply:
    """A stream that stops after ``after_chunks`` text deltas, without ``message_stop``."""
    return Reply(text=text, cut_after_chunks=after_chunks, cut_mode=mode, chunk_size=chunk_size)


def stream_error(
    text: str, *, after_chunks: int, error_type: str = "overloaded_error", chunk_size: int = 4
) -> Reply:
    """A stream that sends ``event: error`` after ``after_chunks`` text deltas."""
    return Reply(
        text=text,
        cut_after_chunks=after_chunks,
        stream_error_type=error_type,
        chunk_size=chunk_size,
    )


def not_json(text: str = "Sure! Here are the memories: the user likes tea.") -> Reply:
    """A structured-output reply that is not the promised JSON."""
    return Reply(text=text)


def slow(reply: ReplyLike, delay_s: float) -> Reply:
    """``reply`` sent after ``delay_s`` seconds (e.g. a 30-second reflection)."""
    return dataclasses.replace(_as_reply(reply), delay_s=delay_s)


@dataclass
class RecordedRequest:
    """One request as received: ``body`` is the parsed JSON (``{}`` if unparsable),
    ``headers`` lower-cased, ``kind`` chat or extract, ``status`` the status answered
    (0: the connection was dropped unanswered); ``sha256`` and ``size`` of the body's bytes
    as they arrived."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    kind: Kind
    status: int = 0
    sha256: str = ""
    size: int = 0

    @property
    def system_blocks(self) -> list[dict[str, Any]]:
        """``system`` as a list of text blocks (a plain string becomes one block)."""
        return _system_blocks(self.body)

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """``output_config.format.schema``, or None for a chat request."""
        fmt = (self.body.get("output_config") or {}).get("format") or {}
        schema = fmt.get("schema")
        return schema if isinstance(schema, dict) else None


@dataclass
class UsageTotals:
    """Token counts summed over every 200 answer since start or :meth:`FakeAnthropic.reset`."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


MIN_CACHE_TOKENS = 1024
"""Minimum cacheable prefix, in tokens, of the default model (Claude Opus 4.8: 1,024; some
models need 2,048 or 4,096). Shorter prefixes are processed but never cached."""


def count_tokens(text: str) -> int:
    """The fake's tokenizer: ``ceil(len(text) / 4)``."""
    return (len(text) + 3) // 4


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """A request's prompt size as the fake counts it: :func:`count_tokens` of every system
    block and every message's text (``/v1/messages`` and ``/v1/messages/count_tokens``)."""
    texts = [str(b.get("text", "")) for b in _system_blocks(body)]
    return (
        sum(map(count_tokens, texts))
        + sum(
            count_tokens(_content_text(m.get("content")))
            for m in body.get("messages") or []
            if isinstance(m, dict)
        )
        + file_tokens(body)
    )


def request_kind(body: Mapping[str, Any]) -> Kind:
    """``"extract"`` when the body asks for structured output, else ``"chat"``."""
    config = body.get("output_config")
    return "extract" if isinstance(config, dict) and config.get("format") else "chat"


class FakeAnthropic:
    """The fake server. Start with ``await start()`` (or ``async with``); ``base_url`` is set
    once started; ``stop()`` closes every connection.

    ``chunk_size`` is characters per text delta; delays are seconds; a ``ping`` event is
    sent after ``message_start`` and then every ``ping_every`` deltas.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        chunk_size: int = 8,
        chunk_delay_s: float = 0.0,
        first_token_delay_s: float = 0.0,
        ping_every: int = 6,
        responder: Responder | None = None,
        min_cache_tokens: int = MIN_CACHE_TOKENS,
    ) -> None:
        self.min_cache_tokens = min_cache_tokens
        self.host, self.port, self.api_key = host, port, api_key
        self.chunk_size, self.chunk_delay_s = chunk_size, chunk_delay_s
        self.first_token_delay_s, self.ping_every = first_token_delay_s, ping_every
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.count_requests: list[RecordedRequest] = []
        self.totals = UsageTotals()
        self._queues: dict[str, deque[ReplyLike]] = {
            "chat": deque(),
            "extract": deque(),
            "any": deque(),
        }
        self._cache: set[tuple[str, tuple[str, ...]]] = set()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # --- lifecycle
    async def start(self) -> None:
        """Listen on ``host:port`` (0 = ephemeral) and set ``base_url``."""
        # Bodies up to twice the API's 32 MB are read, so that the fake refuses them as the
        # API does (413 request_too_large) rather than aiohttp's own 413.
        app = web.Application(client_max_size=2 * MAX_REQUEST_BYTES)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/_fake/enqueue", self._control_enqueue)
        app.router.add_get("/_fake/requests", self._control_requests)
        app.router.add_get("/_fake/totals", self._control_totals)
        app.router.add_post("/_fake/reset", self._control_reset)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.base_url = f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        """Stop listening and close connections (pending delayed replies are cancelled)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeAnthropic:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- scripting
    def enqueue(
        self,
        *replies: ReplyLike,
        kind: Literal["chat", "extract", "any"] = "any",
        times: int = 1,
    ) -> None:
        """Queue ``replies`` for requests of ``kind``, consumed in order; the whole sequence
        is queued ``times`` times (``enqueue(overloaded(), times=3)``: three 529s)."""
        for _ in range(times):
            self._queues[kind].extend(replies)

    def pending(self, kind: Literal["chat", "extract", "any"] = "any") -> int:
        """How many scripted replies of ``kind`` are still queued."""
        return len(self._queues[kind])

    def reset(self) -> None:
        """Forget recorded requests, queued replies, totals and the prompt cache."""
        self.requests.clear()
        self.count_requests.clear()
        for queue in self._queues.values():
            queue.clear()
        self.totals = UsageTotals()
        self._cache.clear()

    def requests_of(self, kind: Kind) -> list[RecordedRequest]:
        """The recorded requests of one kind, in arrival order."""
        return [r for r in self.requests if r.kind == kind]

    # --- the Messages endpoint
    async def _messages(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        if len(raw) > MAX_REQUEST_BYTES:
            return _error_response(
                413, "request_too_large", "Request exceeds the maximum allowed number of bytes."
            )
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        record = RecordedRequest(
            path=request.path,
            body=body if isinstance(body, dict) else {},
            headers={k.lower(): v for k, v in request.headers.items()},
            kind=request_kind(body) if isinstance(body, dict) else "chat",
            sha256=hashlib.sha256(raw).hexdigest(),
            size=len(raw),
        )
        self.requests.append(record)
        refusal = self._refusal(record, body)
        if refusal is not None:
            record.status = refusal[0]
            return _error_response(refusal[0], refusal[1], refusal[2])
        reply = await self._next_reply(record)
        if reply.delay_s > 0:
            await asyncio.sleep(reply.delay_s)
        record.status = reply.status
        if reply.status != 200:
            return _error_response(
                reply.status, reply.error_type, reply.error_message, reply.retry_after_s
            )
        usage = self._account(record.body, reply)
        if record.body.get("stream") is True:
            return await self._stream(request, record.body, reply, usage)
        if reply.cut_after_chunks is not None:
            record.status = 0
            _drop_connection(request)
            raise asyncio.CancelledError
        return web.json_response(self._message_json(record.body, reply, usage))

    def _refusal(self, record: RecordedRequest, body: object) -> tuple[int, str, str] | None:
        headers = record.headers
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        if not key:
            return 401, "authentication_error", "x-api-key header is required"
        if self.api_key is not None and key != self.api_key:
            return 401, "authentication_error", "invalid x-api-key"
        if "anthropic-version" not in headers:
            return 400, "invalid_request_error", "anthropic-version: header is required"
        if not isinstance(body, dict):
            return 400, "invalid_request_error", "The request body is not valid JSON."
        problem = _validate_body(body)
        return None if problem is None else (400, "invalid_request_error", problem)

    async def _next_reply(self, record: RecordedRequest) -> Reply:
        for name in (record.kind, "any"):
            if self._queues[name]:
                return _as_reply(self._queues[name].popleft())
        if self.responder is not None:
            produced = self.responder(record.body)
            if inspect.isawaitable(produced):
                produced = await produced
            return _as_reply(produced)
        return _default_reply(record)

    def _account(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
        blocks = _system_blocks(body)
        texts = [str(b.get("text", "")) for b in blocks]
        model = str(body.get("model"))
        total = prompt_tokens(body)
        # Like the API: a breakpoint whose prefix is shorter than the model's minimum
        # cacheable length is ignored silently (no cache write, no read).
        prefixes = [
            (model, tuple(texts[: i + 1]))
            for i, b in enumerate(blocks)
            if b.get("cache_control")
            and sum(map(count_tokens, texts[: i + 1])) >= self.min_cache_tokens
        ]
        read = creation = 0
        if prefixes:
            hits = [p for p in prefixes if p in self._cache]
            read = sum(map(count_tokens, hits[-1][1])) if hits else 0
            creation = sum(map(count_tokens, prefixes[-1][1])) - read
            self._cache.update(prefixes)
        usage = {
            "input_tokens": total - read - creation,
            "output_tokens": count_tokens(reply.thinking or "") + count_tokens(reply.text),
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
        }
        self.totals.requests += 1
        for key, value in usage.items():
            setattr(self.totals, key, getattr(self.totals, key) + value)
        return usage

    def _message_json(
        self, body: dict[str, Any], reply: Reply, usage: dict[str, int]
    ) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.thinking is not None:
            content.append({"type": "thinking", "thinking": reply.thinking, "signature": "sig"})
        content.append({"type": "text", "text": reply.text})
        return {
            "id": f"msg_fake_{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    async def _stream(
        self, request: web.Request, body: dict[str, Any], reply: Reply, usage: dict[str, int]
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": f"req_fake_{next(self._ids):06d}",
            }
        )
        await response.prepare(request)
        start = self._message_json(body, reply, usage)
        start.update(content=[], stop_reason=None)
        start["usage"] = {**usage, "output_tokens": 1}
        size = reply.chunk_size or self.chunk_size
        delay = self.chunk_delay_s if reply.chunk_delay_s is None else reply.chunk_delay_s
        first = (
            self.first_token_delay_s
            if reply.first_token_delay_s is None
            else reply.first_token_delay_s
        )
        sent = 0

        async def send(event: str, data: dict[str, Any]) -> None:
            payload = json.dumps({"type": event, **data} if event != "error" else data)
            await response.write(f"event: {event}\ndata: {payload}\n\n".encode())

        try:
            await send("message_start", {"message": start})
            await send("ping", {})
            if first > 0:
                await asyncio.sleep(first)
            index = 0
            if reply.thinking is not None:
                await send("content_block_start", _block_start(index, "thinking"))
                for piece in _chunks(reply.thinking, size):
                    delta = {"type": "thinking_delta", "thinking": piece}
                    await send("content_block_delta", {"index": index, "delta": delta})
                    await asyncio.sleep(delay)
                delta = {"type": "signature_delta", "signature": "sig"}
                await send("content_block_delta", {"index": index, "delta": delta})
                await send("content_block_stop", {"index": index})
                index += 1
            await send("content_block_start", _block_start(index, "text"))
            for piece in _chunks(reply.text, size):
                if reply.cut_after_chunks is not None and sent >= reply.cut_after_chunks:
                    break
                delta = {"type": "text_delta", "text": piece}
                await send("content_block_delta", {"index": index, "delta": delta})
                sent += 1
                if self.ping_every and sent % self.ping_every == 0:
                    await send("ping", {})
                await asyncio.sleep(delay)
            if reply.cut_after_chunks is not None:
                if reply.stream_error_type is not None:
                    error = {"type": reply.stream_error_type, "message": reply.stream_error_message}
                    await send("error", {"type": "error", "error": error})
                elif reply.cut_mode == "abort":
                    _drop_connection(request)
                    raise asyncio.CancelledError
                await response.write_eof()
                return response
            await send("content_block_stop", {"index": index})
            delta = {"stop_reason": reply.stop_reason, "stop_sequence": None}
            await send("message_delta", {"delta": delta, "usage": usage})
            await send("message_stop", {})
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        return response

    # --- the token counting endpoint
    async def _count_tokens(self, request: web.Request) -> web.Response:
        """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}`` where N is what
        ``/v1/messages`` would count as the prompt's total (input + cache reads + writes) for
        the same body. Refused like ``/v1/messages`` (``max_tokens`` is not required);
        recorded in :attr:`count_requests`, never in ``requests`` or ``totals``."""
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        record = RecordedRequest(
            path=request.path,
            body=body if isinstance(body, dict) else {},
            headers={k.lower(): v for k, v in request.headers.items()},
            kind=request_kind(body) if isinstance(body, dict) else "chat",
        )
        self.count_requests.append(record)
        checked = {"max_tokens": 1, **body} if isinstance(body, dict) else body
        refusal = self._refusal(record, checked)
        if refusal is not None:
            record.status = refusal[0]
            return _error_response(refusal[0], refusal[1], refusal[2])
        record.status = 200
        return web.json_response({"input_tokens": prompt_tokens(record.body)})

    # --- control endpoints for out-of-process use
    async def _control_enqueue(self, request: web.Request) -> web.Response:
        spec = await request.json()
        reply: ReplyLike = Reply(**spec["reply"]) if "reply" in spec else spec.get("text", "")
        if "json" in spec:
            reply = json.dumps(spec["json"])
        self.enqueue(reply, kind=spec.get("kind", "any"), times=int(spec.get("times", 1)))
        return web.json_response({"pending": {k: len(q) for k, q in self._queues.items()}})

    async def _control_requests(self, request: web.Request) -> web.Response:
        rows = [{"kind": r.kind, "status": r.status, "body": r.body} for r in self.requests]
        return web.json_response(rows)

    async def _control_totals(self, request: web.Request) -> web.Response:
        return web.json_response(dataclasses.asdict(self.totals))

    async def _control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})


@contextlib.asynccontextmanager
async def running_fake_anthropic(**options: Any) -> AsyncIterator[FakeAnthropic]:
    """Start a :class:`FakeAnthropic` (keyword options as its constructor) and stop it after."""
    fake = FakeAnthropic(**options)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


# --- helpers
def _error_response(
    status: int, error_type: str, message: str, retry_after_s: float | None = None
) -> web.Response:
    headers = {"request-id": "req_fake_error"}
    if retry_after_s is not None:
        headers["retry-after"] = f"{retry_after_s:g}"
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return web.json_response(body, status=status, headers=headers)


def _drop_connection(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()


def _block_start(index: int, kind: str) -> dict[str, Any]:
    block: dict[str, Any] = (
        {"type": "thinking", "thinking": "", "signature": ""}
        if kind == "thinking"
        else {"type": "text", "text": ""}
    )
    return {"index": index, "content_block": block}


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))]


def _as_reply(value: ReplyLike) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(text=value)
    return Reply(text=json.dumps(value))


def _system_blocks(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    system = body.get("system")
    if isinstance(system, str):
        return [{"type": "text", "text": system}]
    return [b for b in system or [] if isinstance(b, dict)]


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _default_reply(record: RecordedRequest) -> Reply:
    if record.kind == "extract":
        schema = record.output_schema or {}
        return Reply(text=json.dumps(_minimal_instance(schema, schema.get("$defs", {}))))
    messages = record.body.get("messages") or [{}]
    said = _content_text(messages[-1].get("content"))
    thinking_on = (record.body.get("thinking") or {}).get("type") in ("adaptive", "enabled")
    return Reply(
        text=f"You said: {said[:200]}",
        thinking="The user said something; I answer briefly." if thinking_on else None,
    )


def _minimal_instance(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    """The smallest value valid against ``schema`` (required keys only, empty arrays)."""
    if "$ref" in schema:
        return _minimal_instance(defs[str(schema["$ref"]).rsplit("/", 1)[-1]], defs)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _minimal_instance(schema[key][0], defs)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties", {})
        return {k: _minimal_instance(props.get(k, {}), defs) for k in schema.get("required", [])}
    if kind == "array":
        item = _minimal_instance(schema.get("items", {}), defs)
        return [item] if schema.get("minItems") == 1 else []
    formats = {"date-time": "2024-01-01T00:00:00Z", "date": "2024-01-01", "uuid": "0" * 32}
    return {
        "string": formats.get(schema.get("format", ""), ""),
        "integer": 0,
        "number": 0,
        "boolean": False,
    }.get(str(kind))


def _validate_body(body: dict[str, Any]) -> str | None:
    """The first reason the real API would refuse ``body``, or None."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Input should be greater than or equal to 1"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
    thinking = body.get("thinking")
    if thinking is not None:
        kind = thinking.get("type") if isinstance(thinking, dict) else None
        if kind not in ("adaptive", "enabled", "disabled"):
            return "thinking.type: Input should be 'adaptive', 'enabled' or 'disabled'"
        budget = thinking.get("budget_tokens")
        if kind == "enabled" and (not isinstance(budget, int) or not 1024 <= budget < max_tokens):
            return "thinking.enabled.budget_tokens: must be >= 1024 and less than max_tokens"
    blocks = _system_blocks(body)
    breakpoints = sum(1 for b in blocks if b.get("cache_control"))
    if breakpoints > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
    for i, block in enumerate(blocks):
        control = block.get("cache_control")
        if control is not None and control.get("type") != "ephemeral":
            return f"system.{i}.cache_control.type: Input should be 'ephemeral'"
    problem = check_files(body)
    if problem is not None:
        return problem
    config = body.get("output_config")
    if isinstance(config, dict) and config.get("format") is not None:
        fmt = config["format"]
        if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
            return "output_config.format.type: Input should be 'json_schema'"
        if not isinstance(fmt.get("schema"), dict):
            return "output_config.format.schema: Field required"
        return _schema_problem(fmt["schema"], "output_config.format.schema")
    return None


def _schema_problem(node: object, where: str) -> str | None:
    """The first unsupported construct in a structured-output schema, or None."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            if (problem := _schema_problem(item, f"{where}.{i}")) is not None:
                return problem
        return None
    if not isinstance(node, dict):
        return None
    for keyword in sorted(REFUSED_SCHEMA_KEYWORDS & node.keys()):
        return f"{where}: property '{keyword}' is not supported"
    if node.get("minItems", 0) not in (0, 1):
        return f"{where}: minItems values other than 0 or 1 are not supported"
    fmt = node.get("format")
    if node.get("type") == "string" and fmt is not None and fmt not in SUPPORTED_STRING_FORMATS:
        return f"{where}: string format '{fmt}' is not supported"
    if node.get("type") == "object" and node.get("additionalProperties") is not False:
        return f"{where}: 'additionalProperties' must be explicitly set to false for objects"
    for key in ("properties", "$defs", "definitions"):
        for name, child in (node.get(key) or {}).items():
            if (problem := _schema_problem(child, f"{where}.{key}.{name}")) is not None:
                return problem
    for key in ("items", "anyOf", "allOf", "oneOf", "prefixItems"):
        if key in node and (problem := _schema_problem(node[key], f"{where}.{key}")) is not None:
            return problem
    return None


# --- process entry point
def _load_responder(spec: str) -> Responder:
    module_name, _, attr = spec.partition(":")
    responder: Responder = getattr(importlib.import_module(module_name), attr)
    return responder


async def _serve(args: argparse.Namespace) -> None:
    fake = FakeAnthropic(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        chunk_size=args.chunk_size,
        chunk_delay_s=args.chunk_delay_s,
        first_token_delay_s=args.first_token_delay_s,
        responder=_load_responder(args.responder) if args.responder else None,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with fake:
        print(fake.base_url, flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    """Run the fake until SIGTERM/SIGINT; prints the base URL first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--api-key", default=None, help="if set, only this x-api-key is accepted")
    parser.add_argument("--chunk-size", type=int, default=8, help="characters per text delta")
    parser.add_argument("--chunk-delay-s", type=float, default=0.0)
    parser.add_argument("--first-token-delay-s", type=float, default=0.0)
    parser.add_argument("--responder", default=None, help="package.module:function(body)")
    asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    # Run the package module, not __main__, so responders share its Reply class.
    from tests.fakes.anthropic_server import main as package_main

    package_main()
