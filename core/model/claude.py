"""The ChatModel seam and its Claude implementation over ``anthropic.AsyncAnthropic``.

Two calls reach the model:

- ``stream(system=..., messages=...)``: the answer, streamed with adaptive thinking
  (``thinking={"type": "adaptive"}``). Only text deltas are yielded; thinking never is.
- ``extract(system=..., prompt=..., output=Model, call=...)``: a reflection, cleanup or
  consolidation call (``call``, a :data:`core.types.CallKind`, labels its tokens in the
  metrics), one non-streaming call with thinking disabled and structured output
  (``output_config={"format": {"type": "json_schema", "schema": ...}}``), parsed and validated
  with the pydantic model here, since the API returns it as text.

Prompt caching: each :class:`SystemBlock` with ``cache=True`` is sent with
``cache_control: {"type": "ephemeral"}``; put the stable block first, the volatile after it.

Errors (all :class:`core.errors.ModelError`, ``user_message`` in quotes). The SDK has
already retried 408/409/429/5xx ``max_retries`` times, obeying ``retry-after``:

==========================================  ======================================================
401/403 (``AuthenticationError``...)        "The API key was refused; an admin must fix
                                            ANTHROPIC_API_KEY."
429, or an in-stream ``rate_limit_error``   "Claude's rate limit for this bot was reached; try
                                            again in 40 seconds." (when from ``retry-after``
                                            or the ``anthropic-ratelimit-*-reset`` headers;
                                            "in a minute" when none says)
529, or an in-stream ``overloaded_error``   "Claude is overloaded, try again in a minute."
other 5xx, or an in-stream ``api_error``    "Claude had an internal error, try again in a minute."
400 and other statuses                      "Claude refused the request."
``APITimeoutError``                         "Claude timed out."
``APIConnectionError``                      "I can't reach Claude right now."
answer stream without ``message_stop``      ``StreamCutError`` (``partial`` = text so far): the
                                            body ended, the connection dropped, or a read
                                            timed out after some text (before any: "Claude
                                            timed out.")
extraction text not valid for the model     ``MalformedOutput``
==========================================  ======================================================

Logging: a failed call's model, status, error type and request id at WARNING; each finished
call's model, stop reason, token counts and request id at DEBUG (two lines a turn were a hot
path at INFO; the tokens are in the store's usage table and the metrics anyway); prompt and
answer text only at DEBUG; never the API key.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import math
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, cast

import pydantic

from core.errors import MalformedOutput, ModelError, StreamCutError
from core.metrics import Metrics
from core.model.body import FileMarkers, RequestBody
from core.types import CallKind

if TYPE_CHECKING:
    # The SDK (over a second of imports) is loaded by the code that calls the API, not by
    # importing this module: the data types here (Usage, ChatMessage, ...) are imported by
    # commands that never call Claude (`selfmind usage`, memory commands; bench/startup.py).
    from types import TracebackType

    import anthropic
    from anthropic.types import (
        Base64PDFSourceParam,
        ContentBlockParam,
        MessageParam,
        PlainTextSourceParam,
        TextBlockParam,
    )
    from anthropic.types import Usage as ApiUsage

    from core.settings import Settings

logger = logging.getLogger(__name__)


def _load_sdk() -> None:
    """Import the Anthropic SDK (:meth:`ClaudeChatModel.preload`'s thread)."""
    importlib.import_module("anthropic")


T = TypeVar("T", bound=pydantic.BaseModel)


@dataclass(frozen=True)
class SystemBlock:
    """One block of the system prompt; ``cache=True`` marks a prompt-cache breakpoint."""

    text: str
    cache: bool = False


@dataclass(frozen=True)
class FileBlock:
    """A file Claude reads with the current message (:mod:`core.files`): ``kind`` ``image``
    (an ``image`` block) or ``pdf`` (a ``document`` block), both with ``data`` the file's
    bytes, held once and base64-encoded only as the request is sent
    (:mod:`core.model.body`); or ``text`` (a ``document`` block with a text source, ``data``
    the text). ``name`` is the file's name (a document's ``title``)."""

    kind: Literal["image", "pdf", "text"]
    name: str
    media_type: str
    data: bytes | bytearray | str = field(repr=False)


@dataclass(frozen=True)
class ChatMessage:
    """One turn of the conversation history, oldest first; ``content`` is plain text.
    ``files``: only on the current user message (history keeps placeholders), sent as
    content blocks before the text, as the vision docs advise."""

    role: Literal["user", "assistant"]
    content: str
    files: tuple[FileBlock, ...] = ()


@dataclass(frozen=True)
class Usage:
    """Token counts of one call, as the API reports them (0 when absent).

    ``input_tokens`` excludes the cached prefix: the prompt's total is the sum of
    ``input_tokens``, ``cache_read_input_tokens`` and ``cache_creation_input_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    @classmethod
    def from_json(cls, usage: Mapping[str, Any]) -> Usage:
        """From the ``usage`` object of the API's JSON (a ``message`` or ``message_start``);
        missing or null counts are 0."""
        return cls(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
            cache_read_input_tokens=usage.get("cache_read_input_tokens") or 0,
            cache_creation_input_tokens=usage.get("cache_creation_input_tokens") or 0,
        )

    @classmethod
    def from_api(cls, usage: ApiUsage) -> Usage:
        """Convert the SDK's ``Usage`` (whose cache counts may be None)."""
        return cls(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_read_input_tokens=usage.cache_read_input_tokens or 0,
            cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        )


@dataclass(frozen=True)
class Extraction(Generic[T]):
    """A validated structured-output reply: ``value`` is an instance of the requested model."""

    value: T
    usage: Usage


class AnswerStream(Protocol):
    """An answer being streamed: iterate for text deltas (``str``, in order).

    Once exhausted, ``stop_reason`` (e.g. ``"end_turn"``, ``"max_tokens"``) and ``usage`` are
    set; before that they are None. Iteration raises ``ModelError`` (``StreamCutError`` when
    the stream ends before ``message_stop``). Call ``aclose()`` when abandoning it early.
    """

    def __aiter__(self) -> AnswerStream: ...

    async def __anext__(self) -> str: ...

    @property
    def stop_reason(self) -> str | None: ...

    @property
    def usage(self) -> Usage | None: ...

    async def aclose(self) -> None: ...


class ChatModel(Protocol):
    """The LLM seam: a streamed chat answer and a structured extraction."""

    def stream(
        self,
        *,
        system: Sequence[SystemBlock],
        messages: Sequence[ChatMessage],
        on_sent: Callable[[], None] | None = None,
    ) -> AnswerStream:
        """Start an answer; no request is sent until the first iteration. ``on_sent`` is
        called once the request is done with (its answer begun or its sending failed): from
        then on nothing of ``messages`` is held for it, its files' bytes included."""
        ...

    async def extract(
        self, *, system: str, prompt: str, output: type[T], call: CallKind
    ) -> Extraction[T]:
        """Ask for JSON matching ``output``'s schema; raises ``MalformedOutput`` if it is not.
        ``call``: what the call is for (``reflection``, ``cleanup``, ``consolidation``), as
        its usage is recorded; its tokens are counted under it (:meth:`Metrics.tokens`)."""
        ...


class ClaudeChatModel:
    """:class:`ChatModel` over the Messages API. Owns its ``AsyncAnthropic`` client, made at
    the first call (or :meth:`connect`): use as ``async with`` (or call ``aclose()``).

    ``max_tokens`` bounds a chat answer (thinking included), ``memory_max_tokens`` an
    extraction; ``timeout_s`` is the SDK's per-request timeout in seconds; ``max_retries`` is
    how often the SDK retries 408/409/429/5xx and connection errors.
    """

    def __init__(
        self,
        *,
        api_key: str,
        chat_model: str,
        reflection_model: str,
        max_tokens: int,
        memory_max_tokens: int,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout_s: float = 600.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.metrics = metrics or Metrics()
        self._api_key = api_key
        self._base_url = base_url
        self._max_retries = max_retries
        self._timeout_s = timeout_s
        self._made: anthropic.AsyncAnthropic | None = None
        self._preloading: asyncio.Task[None] | None = None
        self.chat_model = chat_model
        self.reflection_model = reflection_model
        self.max_tokens = max_tokens
        self.memory_max_tokens = memory_max_tokens

    @property
    def _client(self) -> anthropic.AsyncAnthropic:
        """The SDK's client, made at the first call: importing the SDK takes 1-2 s of CPU,
        which a process that never calls Claude (a terminal chat with nothing to answer, its
        memory commands) does not pay. :meth:`connect` makes it at once."""
        if self._made is None:
            import anthropic

            # aiohttp under the SDK instead of httpx's pool: bench/load.py measured 20-27 %
            # less bot CPU per turn (the `aiohttp` extra; the transport is vendored in the
            # SDK). OpenTelemetry off: the bot sends no telemetry anywhere (README, Privacy),
            # and the SDK otherwise builds a span's attributes and trace headers for every
            # call (bench/turn_cpu.py: a tenth of an answer stream's CPU).
            self._made = anthropic.AsyncAnthropic(
                api_key=self._api_key,
                base_url=self._base_url,
                max_retries=self._max_retries,
                timeout=self._timeout_s,
                http_client=anthropic.DefaultAioHttpClient(),
                open_telemetry={"traces": False, "propagation": False},
            )
        return self._made

    def connect(self) -> None:
        """Make the SDK's client now rather than at the first call (the bots: their first
        answer does not wait for the SDK's import)."""
        self._client  # noqa: B018 (made as a side effect)

    def preload(self) -> None:
        """Start importing the SDK in a worker thread while the event loop goes on (the
        terminal: the person types their first message meanwhile, and its answer does not
        wait for the 1-2 s import); call on the running loop. Every call to Claude waits for
        it first (:meth:`_sdk_ready`): one package imported by two threads at once may be
        seen half made. The client itself is still made at the first call, on the loop;
        :meth:`aclose` waits for the import (a thread cannot be cancelled)."""
        if self._made is None and self._preloading is None:
            self._preloading = asyncio.get_running_loop().create_task(
                self._import_sdk(), name="sdk-preload"
            )

    @staticmethod
    async def _import_sdk() -> None:
        started = time.perf_counter()
        try:
            await asyncio.to_thread(_load_sdk)
        except Exception:  # the first call imports it again, on the loop, and says why
            logger.debug("preloading the model SDK failed", exc_info=True)
        else:
            logger.debug("the model SDK was preloaded in %.2f s", time.perf_counter() - started)

    async def _sdk_ready(self) -> None:
        """Wait for :meth:`preload`'s import, if one was started."""
        if self._preloading is not None:
            await asyncio.shield(self._preloading)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, metrics: Metrics | None = None
    ) -> ClaudeChatModel:
        """Build from :class:`core.settings.Settings`; ``ConfigError`` if the key is missing."""
        return cls(
            api_key=settings.require_model_key(),
            base_url=settings.anthropic_base_url,
            chat_model=settings.chat_model,
            reflection_model=settings.reflection_model,
            max_tokens=settings.max_tokens,
            memory_max_tokens=settings.memory_max_tokens,
            max_retries=settings.anthropic_max_retries,
            timeout_s=settings.anthropic_timeout_s,
            metrics=metrics,
        )

    async def aclose(self) -> None:
        """Close the HTTP client and its connections (if it was ever made)."""
        await self._sdk_ready()
        if self._made is not None:
            await self._made.close()

    async def probe(self, *, model: str, timeout_s: float) -> int:
        """Ask the API to count a one-word prompt's tokens for ``model`` (free; once, no
        retry): proves the key, the base URL and the model name. Returns the count;
        ``ModelError`` as in the module docstring."""
        await self._sdk_ready()
        import anthropic

        client = self._client.with_options(max_retries=0, timeout=timeout_s)
        try:
            counted = await client.messages.count_tokens(
                model=model, messages=[{"role": "user", "content": "ping"}]
            )
        except anthropic.APIError as exc:
            raise _model_error(exc, call="probe") from exc
        return int(counted.input_tokens)

    async def __aenter__(self) -> ClaudeChatModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def stream(
        self,
        *,
        system: Sequence[SystemBlock],
        messages: Sequence[ChatMessage],
        on_sent: Callable[[], None] | None = None,
    ) -> AnswerStream:
        """Stream an answer from ``chat_model``, thinking adaptive; see :class:`AnswerStream`
        and :meth:`ChatModel.stream`."""
        return _ClaudeAnswerStream(self, system=system, messages=messages, on_sent=on_sent)

    async def extract(
        self, *, system: str, prompt: str, output: type[T], call: CallKind
    ) -> Extraction[T]:
        """One structured-output call to ``reflection_model`` (thinking disabled).

        The schema sent is ``anthropic.transform_schema(output)``: ``additionalProperties:
        false`` on objects, and constraints the API refuses (``max_length``, ``ge``...) moved
        into descriptions; they are enforced here by ``output.model_validate_json``.
        Raises ``MalformedOutput`` if the text is not valid JSON for ``output``, else
        ``ModelError`` as in the module docstring.
        """
        await self._sdk_ready()
        import anthropic

        logger.debug("extract prompt (%d chars): %s", len(prompt), prompt)
        try:
            # The reply as plain JSON (``parse(to=object)``), not the SDK's ``Message``
            # model: its construction was a quarter of the call's CPU (bench/turn_cpu.py),
            # and only the text, the stop reason and the usage are read.
            raw = await self._client.messages.with_raw_response.create(
                model=self.reflection_model,
                max_tokens=self.memory_max_tokens,
                system=system,
                messages=[{"role": "user", "content": prompt}],
                thinking={"type": "disabled"},
                output_config={"format": {"type": "json_schema", "schema": _schema(output)}},
            )
            message = _json_object(await raw.parse(to=object))
        except anthropic.APIError as exc:
            raise self.metrics.claude_error(_model_error(exc, call="extract"), exc) from exc
        usage = Usage.from_json(_json_object(message.get("usage")))
        self.metrics.tokens(call=call, usage=usage)
        stop_reason = message.get("stop_reason")
        text = "".join(
            str(block.get("text") or "")
            for block in message.get("content") or []
            if isinstance(block, dict) and block.get("type") == "text"
        )
        logger.debug(
            "extract done: model=%s output=%s stop_reason=%s usage=%s request_id=%s",
            self.reflection_model,
            output.__name__,
            stop_reason,
            usage,
            raw.request_id,
        )
        logger.debug("extract reply (%d chars): %s", len(text), text)
        try:
            value = output.model_validate_json(text)
        except pydantic.ValidationError as exc:
            reason = _validation_summary(exc, stop_reason=stop_reason)
            logger.warning("extract reply malformed: output=%s %s", output.__name__, reason)
            raise self.metrics.claude_error(MalformedOutput(reason)) from None
        return Extraction(value=value, usage=usage)


class _ClaudeAnswerStream:
    """One streamed answer (see :class:`AnswerStream`); the request starts on first iteration."""

    def __init__(
        self,
        model: ClaudeChatModel,
        *,
        system: Sequence[SystemBlock],
        messages: Sequence[ChatMessage],
        on_sent: Callable[[], None] | None = None,
    ) -> None:
        self._model = model
        self._on_sent = on_sent
        self._system: list[TextBlockParam] = [_system_param(block) for block in system]
        # The file bytes stay in ``_files`` (not copied into the params: markers stand in).
        self._files = FileMarkers()
        self._messages: list[MessageParam] = [_message_param(m, self._files) for m in messages]
        self._gen = self._run()
        self.stop_reason: str | None = None
        self.usage: Usage | None = None

    def __aiter__(self) -> _ClaudeAnswerStream:
        return self

    async def __anext__(self) -> str:
        try:
            return await self._gen.__anext__()
        except ModelError as exc:
            self._model.metrics.claude_error(exc)
            raise

    async def aclose(self) -> None:
        """Stop the stream and release its connection; safe to call twice."""
        await self._gen.aclose()

    async def _run(self) -> AsyncGenerator[str, None]:
        await self._model._sdk_ready()
        import anthropic
        import httpx2

        model = self._model
        parts: list[str] = []
        stopped = False
        if logger.isEnabledFor(logging.DEBUG):  # file bytes never reach a log
            logger.debug("chat request: system=%s messages=%s", self._system, _loggable(self))
        usage = Usage()
        began = False
        try:
            events = await self._send()
            began = True
            async with events:
                async for item in events:
                    event = _json_object(item)
                    kind = event.get("type")
                    if kind == "content_block_delta":
                        delta = _json_object(event.get("delta"))
                        if delta.get("type") == "text_delta":
                            text = str(delta.get("text") or "")
                            parts.append(text)
                            yield text
                    elif kind == "message_start":
                        message = _json_object(event.get("message"))
                        # Kept as reported: a stream stopped or cut later still counts it.
                        usage = self.usage = Usage.from_json(_json_object(message.get("usage")))
                    elif kind == "message_delta":
                        self.stop_reason = _json_object(event.get("delta")).get("stop_reason")
                        usage = self.usage = _delta_usage(usage, _json_object(event.get("usage")))
                    elif kind == "message_stop":
                        stopped = True
                if not stopped:
                    raise _cut(parts, "body ended")
        except anthropic.APIConnectionError as exc:
            # Once the response has begun, a dropped connection is a cut stream whatever the
            # transport or SDK version reports it as (anthropic >= 2.17 wraps the transport's
            # error in APIConnectionError while iterating; earlier releases let it through).
            if not began or (isinstance(exc, anthropic.APITimeoutError) and not parts):
                raise _model_error(exc, call="stream") from exc
            raise _cut(parts, type(exc.__cause__ or exc).__name__) from exc
        except anthropic.APIError as exc:
            raise _model_error(exc, call="stream") from exc
        except httpx2.TimeoutException as exc:
            if parts:
                raise _cut(parts, "read timed out") from exc
            logger.warning("stream timed out before the first text delta")
            raise ModelError("stream: read timed out", user_message="Claude timed out.") from exc
        except httpx2.TransportError as exc:
            raise _cut(parts, type(exc).__name__) from exc
        self.usage = usage
        model.metrics.tokens(call="chat", usage=self.usage)
        logger.debug(
            "stream done: model=%s stop_reason=%s chars=%d usage=%s",
            model.chat_model,
            self.stop_reason,
            sum(map(len, parts)),
            self.usage,
        )
        logger.debug("chat answer: %s", "".join(parts))

    async def _send(self) -> anthropic.AsyncStream[object]:
        """POST the request and return its event stream once the response has begun.

        The raw event stream, not ``messages.stream()``: that helper rebuilds a message
        snapshot at every event (a third of the SDK's CPU per answer here); only the text,
        the stop reason and the usage are needed. Its events as plain JSON
        (``AsyncStream[object]``), not SDK models: building one per event was a fifth of the
        stream's CPU (bench/turn_cpu.py). The SDK still reads the SSE, retries, and raises
        an in-stream ``error`` event as an ``APIStatusError``. The body is the one
        ``messages.create`` would send, byte for byte, but streamed with its files
        base64-encoded as they go (:class:`core.model.body.RequestBody`), and dropped once
        the response has begun.
        """
        import anthropic

        model = self._model
        body = RequestBody(
            {
                "max_tokens": model.max_tokens,
                "messages": self._messages,
                "model": model.chat_model,
                "stream": True,
                "system": self._system,
                "thinking": {"type": "adaptive"},
            },
            self._files,
        )
        self._messages, self._files = [], FileMarkers()  # the body holds the files now
        try:
            if not body.has_files:
                return await model._client.post(
                    "/v1/messages",
                    cast_to=object,
                    content=body.whole(),
                    stream=True,
                    stream_cls=anthropic.AsyncStream[object],
                )
            return await model._client.post(
                "/v1/messages",
                cast_to=object,
                content=body,
                options={"headers": {"Content-Length": str(body.length)}},
                stream=True,
                stream_cls=anthropic.AsyncStream[object],
            )
        finally:
            body.release()
            if self._on_sent is not None:
                on_sent, self._on_sent = self._on_sent, None
                on_sent()


def _json_object(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else ``{}`` (a field the API left out or null)."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _delta_usage(usage: Usage, delta: Mapping[str, Any]) -> Usage:
    """``usage`` from ``message_start`` updated by a ``message_delta``'s ``usage`` object:
    output tokens are cumulative; the input counts, when present, replace the earlier ones
    (as the SDK's own snapshot does, ``anthropic.lib.streaming._messages.accumulate_event``)."""

    def newer(key: str, old: int) -> int:
        value = delta.get(key)
        return old if value is None else int(value)

    return Usage(
        input_tokens=newer("input_tokens", usage.input_tokens),
        output_tokens=int(delta.get("output_tokens") or 0),
        cache_read_input_tokens=newer("cache_read_input_tokens", usage.cache_read_input_tokens),
        cache_creation_input_tokens=newer(
            "cache_creation_input_tokens", usage.cache_creation_input_tokens
        ),
    )


def _cut(parts: list[str], how: str) -> StreamCutError:
    partial = "".join(parts)
    logger.warning("answer stream cut before message_stop (%s) after %d chars", how, len(partial))
    return StreamCutError(partial=partial)


def _message_param(message: ChatMessage, files: FileMarkers) -> MessageParam:
    if message.role == "user":
        if message.files:
            blocks: list[ContentBlockParam] = []
            for file in message.files:
                blocks += _file_params(file, files)
            blocks.append({"type": "text", "text": message.content})
            return {"role": "user", "content": blocks}
        return {"role": "user", "content": message.content}
    return {"role": "assistant", "content": message.content}


def _file_params(file: FileBlock, files: FileMarkers) -> list[ContentBlockParam]:
    """An image (after a line naming it), or a document titled with the file's name; a
    marker from ``files`` stands in for the base64 of an image's or a PDF's bytes."""
    if isinstance(file.data, str):
        source: Base64PDFSourceParam | PlainTextSourceParam = {
            "type": "text",
            "media_type": "text/plain",
            "data": file.data,
        }
        return [{"type": "document", "source": source, "title": file.name}]
    data = files.marker(file.data)
    if file.kind == "image":
        media_type = cast(
            Literal["image/jpeg", "image/png", "image/gif", "image/webp"], file.media_type
        )
        return [
            {"type": "text", "text": f"[image: {file.name}]"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": media_type, "data": data},
            },
        ]
    source = {"type": "base64", "media_type": "application/pdf", "data": data}
    return [{"type": "document", "source": source, "title": file.name}]


def _loggable(stream: _ClaudeAnswerStream) -> list[object]:
    """The request's messages with every file's data replaced by its length."""
    out: list[object] = []
    for param in stream._messages:
        content = param["content"]
        if isinstance(content, str):
            out.append(param)
            continue
        blocks: list[object] = []
        for block in content:
            item = cast(dict[str, Any], block)
            source = item.get("source")
            if isinstance(source, dict) and "data" in source:
                data = source["data"]
                size = stream._files.base64_chars(data) if isinstance(data, str) else None
                shown = f"<{len(data) if size is None else size} chars>"
                item = {**item, "source": {**source, "data": shown}}
            blocks.append(item)
        out.append({"role": param["role"], "content": blocks})
    return out


def _system_param(block: SystemBlock) -> TextBlockParam:
    param: TextBlockParam = {"type": "text", "text": block.text}
    if block.cache:
        param["cache_control"] = {"type": "ephemeral"}
    return param


@functools.cache
def _schema(output: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The JSON schema sent for ``output``, in the subset the API accepts."""
    import anthropic

    return anthropic.transform_schema(output)


def _validation_summary(exc: pydantic.ValidationError, *, stop_reason: str | None) -> str:
    """Where and why validation failed, without the input values (they are user text)."""
    errors = exc.errors(include_url=False, include_input=False)
    where = "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['type']}" for e in errors[:5]
    )
    return f"{len(errors)} error(s) ({where}), stop_reason={stop_reason}"


_OVERLOADED = "Claude is overloaded, try again in a minute."
_RATE_LIMITED = "Claude's rate limit for this bot was reached; try again {when}."
_INTERNAL = "Claude had an internal error, try again in a minute."
_REFUSED_KEY = "The API key was refused; an admin must fix ANTHROPIC_API_KEY."
_REFUSED = "Claude refused the request."


def _model_error(exc: anthropic.APIError, *, call: str) -> ModelError:
    """Map an SDK error (after its own retries) to a ``ModelError`` with a true user message."""
    import anthropic

    if isinstance(exc, anthropic.APITimeoutError):
        user_message = "Claude timed out."
    elif isinstance(exc, anthropic.APIConnectionError):
        user_message = "I can't reach Claude right now."
    elif isinstance(exc, anthropic.APIStatusError):
        user_message = _status_message(
            exc.status_code, exc.type, retry_after_s(exc.response.headers)
        )
    else:
        user_message = _INTERNAL
    status = getattr(exc, "status_code", None)
    request_id = getattr(exc, "request_id", None)
    logger.warning(
        "%s failed: %s status=%s type=%s request_id=%s",
        call,
        type(exc).__name__,
        status,
        getattr(exc, "type", None),
        request_id,
    )
    detail = f"{call}: {type(exc).__name__} status={status} request_id={request_id}"
    retryable = _retryable(status) or getattr(exc, "type", None) in _RETRYABLE_TYPES
    return ModelError(detail, user_message=user_message, retryable=retryable)


_RETRYABLE_TYPES = ("rate_limit_error", "overloaded_error", "api_error")
"""In-stream errors (they arrive on a 200 response) that a later request may not meet."""


def _retryable(status: int | None) -> bool:
    """Whether the same request may succeed later: a timeout, a dropped connection, 408,
    409, 429 and 5xx may; any other 4xx (400 invalid request, 401 key refused, 403, 404,
    413) answers the same every time (Anthropic's errors page)."""
    return status is None or status in (408, 409, 429) or status >= 500


def retry_after_s(
    headers: Mapping[str, str] | None, *, now: datetime | None = None
) -> float | None:
    """Seconds until a rate-limited request may be sent again, from the response's headers:
    ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), else the soonest
    ``anthropic-ratelimit-*-reset`` (RFC 3339, Anthropic's rate limits page); None when
    none is there or readable (an in-stream error has no headers of its own)."""
    if headers is None:
        return None
    now = now or datetime.now(UTC)
    try:
        if "retry-after-ms" in headers:
            return max(float(headers["retry-after-ms"]) / 1000, 0.0)
        if "retry-after" in headers:
            value = headers["retry-after"]
            try:
                return max(float(value), 0.0)
            except ValueError:
                return max((parsedate_to_datetime(value) - now).total_seconds(), 0.0)
    except (ValueError, TypeError, OverflowError):
        pass
    resets = []
    for name, value in headers.items():
        if name.lower().startswith("anthropic-ratelimit-") and name.lower().endswith("-reset"):
            with contextlib.suppress(ValueError):
                resets.append((datetime.fromisoformat(value) - now).total_seconds())
    return max(min(resets), 0.0) if resets else None


def _in(seconds: float | None) -> str:
    """When to try again, in words: "in 40 seconds", "in 3 minutes", "in a minute" when
    unknown."""
    if seconds is None:
        return "in a minute"
    if seconds < 60:
        whole = max(math.ceil(seconds), 1)
        return f"in {whole} second{'' if whole == 1 else 's'}"
    minutes = math.ceil(seconds / 60)
    return f"in {minutes} minute{'' if minutes == 1 else 's'}"


def _status_message(status: int, error_type: str | None, wait_s: float | None = None) -> str:
    if status in (401, 403) or error_type in ("authentication_error", "permission_error"):
        return _REFUSED_KEY
    if status == 429 or error_type == "rate_limit_error":
        return _RATE_LIMITED.format(when=_in(wait_s))
    if status == 529 or error_type == "overloaded_error":
        return _OVERLOADED
    if status >= 500 or error_type == "api_error":
        return _INTERNAL
    return _REFUSED


__all__ = [
    "AnswerStream",
    "ChatMessage",
    "ChatModel",
    "ClaudeChatModel",
    "Extraction",
    "FileBlock",
    "SystemBlock",
    "Usage",
]
