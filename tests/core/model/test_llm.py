"""core.model.claude against the fake Messages API: the real AsyncAnthropic over real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import aiohttp
import anthropic
import pytest
from pydantic import BaseModel, Field

import core.model.claude
from core.errors import ConfigError, MalformedOutput, ModelError, StreamCutError
from core.model.claude import (
    AnswerStream,
    ChatMessage,
    ClaudeChatModel,
    SystemBlock,
    Usage,
    retry_after_s,
)
from core.settings import Settings
from tests.fakes.anthropic_server import (
    REFUSED_SCHEMA_KEYWORDS,
    FakeAnthropic,
    Reply,
    count_tokens,
    cut_stream,
    not_json,
    overloaded,
    rate_limited,
    running_fake_anthropic,
    server_error,
    slow,
    stream_error,
)

ROOT = Path(__file__).resolve().parents[3]
CHAT_MODEL = "claude-opus-4-8"
REFLECTION_MODEL = "claude-haiku-4-5"
# Long enough to be cached: the API ignores breakpoints under the model's minimum (1,024).
STABLE = "You are SelfMind, a helpful assistant that remembers its users. " * 80
VOLATILE = "Memories about this user: likes green tea; lives in Lyon."


class Fact(BaseModel):
    text: str = Field(max_length=40, description="one durable fact about the user")
    confidence: float = Field(ge=0.0, le=1.0)


class Facts(BaseModel):
    facts: list[Fact] = Field(max_length=5)
    summary: str | None = None


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=4) as server:
        yield server


def make_model(base_url: str, **overrides: Any) -> ClaudeChatModel:
    options: dict[str, Any] = {
        "api_key": "test-key",
        "base_url": base_url,
        "chat_model": CHAT_MODEL,
        "reflection_model": REFLECTION_MODEL,
        "max_tokens": 4096,
        "memory_max_tokens": 512,
        "max_retries": 1,
        "timeout_s": 5.0,
    }
    return ClaudeChatModel(**{**options, **overrides})


@pytest.fixture
async def model(fake: FakeAnthropic) -> AsyncIterator[ClaudeChatModel]:
    async with make_model(fake.base_url) as claude:
        yield claude


def chat(model: ClaudeChatModel, text: str = "Hi, I'm Ada.") -> AnswerStream:
    return model.stream(
        system=[SystemBlock(STABLE, cache=True), SystemBlock(VOLATILE)],
        messages=[ChatMessage("user", text)],
    )


async def collect(stream: AnswerStream) -> list[str]:
    return [delta async for delta in stream]


def schema_nodes(node: object) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for child in node.values():
            yield from schema_nodes(child)
    elif isinstance(node, list):
        for child in node:
            yield from schema_nodes(child)


# --- chat


async def test_a_call_waits_for_the_sdk_preload_under_way(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One package imported by two threads at once may be seen half made: the answer and the
    # extraction each wait until the preload's thread has imported the SDK.
    said: list[str] = []

    def slow_load() -> None:
        time.sleep(0.3)
        said.append("imported")

    monkeypatch.setattr(core.model.claude, "_load_sdk", slow_load)
    fake.enqueue(Reply(text="Hello."), kind="chat")
    async with make_model(fake.base_url) as claude:
        claude.preload()
        claude.preload()  # once
        assert "".join(await collect(chat(claude))) == "Hello."
        said.append("answered")
        claude.preload()  # imported: nothing more
    assert said == ["imported", "answered"]
    async with make_model(fake.base_url) as claude:
        claude.preload()
        await claude.extract(system="s", prompt="p", output=Facts, call="reflection")
        said.append("extracted")
    assert said == ["imported", "answered", "imported", "extracted"]


async def test_stream_yields_text_deltas_only(fake: FakeAnthropic, model: ClaudeChatModel) -> None:
    fake.enqueue(Reply(text="Hello Ada, nice to meet you!", thinking="SECRET plan: be warm."))
    stream = chat(model)
    deltas = await collect(stream)
    assert "".join(deltas) == "Hello Ada, nice to meet you!"
    assert len(deltas) > 1
    assert not any("SECRET" in d for d in deltas)
    assert stream.stop_reason == "end_turn"
    assert stream.usage is not None
    assert stream.usage.output_tokens > 0


async def test_chat_request_shape(fake: FakeAnthropic, model: ClaudeChatModel) -> None:
    stream = model.stream(
        system=[SystemBlock(STABLE, cache=True), SystemBlock(VOLATILE)],
        messages=[
            ChatMessage("user", "I like tea."),
            ChatMessage("assistant", "Noted."),
            ChatMessage("user", "What do I like?"),
        ],
    )
    await collect(stream)
    (sent,) = fake.requests
    body = sent.body
    assert body["model"] == CHAT_MODEL
    assert body["max_tokens"] == 4096
    assert body["stream"] is True
    assert body["thinking"] == {"type": "adaptive"}
    assert "output_config" not in body
    assert body["system"] == [
        {"type": "text", "text": STABLE, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": VOLATILE},
    ]
    assert body["messages"] == [
        {"role": "user", "content": "I like tea."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "What do I like?"},
    ]
    assert sent.headers["authorization"] == "Bearer test-key"


async def test_second_call_reads_the_cached_system_block(
    fake: FakeAnthropic, model: ClaudeChatModel
) -> None:
    first, second = chat(model), chat(model, "And again.")
    await collect(first)
    await collect(second)
    cached = count_tokens(STABLE)
    assert first.usage == Usage(
        input_tokens=count_tokens(VOLATILE) + count_tokens("Hi, I'm Ada."),
        output_tokens=first.usage.output_tokens if first.usage else -1,
        cache_read_input_tokens=0,
        cache_creation_input_tokens=cached,
    )
    assert second.usage is not None
    assert second.usage.cache_read_input_tokens == cached
    assert second.usage.cache_creation_input_tokens == 0
    assert fake.totals.cache_read_input_tokens == cached
    assert fake.totals.requests == 2


async def test_a_short_cached_block_is_not_cached(
    fake: FakeAnthropic, model: ClaudeChatModel
) -> None:
    short = [SystemBlock("Too short to cache.", cache=True), SystemBlock(VOLATILE)]
    for _ in range(2):
        stream = model.stream(system=short, messages=[ChatMessage("user", "Hi")])
        await collect(stream)
        assert stream.usage is not None
        assert stream.usage.cache_read_input_tokens == 0
        assert stream.usage.cache_creation_input_tokens == 0


async def test_rate_limit_is_retried_by_the_sdk(
    fake: FakeAnthropic, model: ClaudeChatModel
) -> None:
    fake.enqueue(rate_limited(retry_after_s=0.01), Reply(text="After the wait."))
    assert "".join(await collect(chat(model))) == "After the wait."
    assert [r.status for r in fake.requests] == [429, 200]
    assert fake.requests[1].headers["x-stainless-retry-count"] == "1"


@pytest.mark.parametrize(
    ("fault", "user_message"),
    [
        (overloaded(retry_after_s=0.01), "Claude is overloaded, try again in a minute."),
        (
            rate_limited(retry_after_s=0.01),
            "Claude's rate limit for this bot was reached; try again in 1 second.",
        ),
        (server_error(retry_after_s=0.01), "Claude had an internal error, try again in a minute."),
    ],
)
async def test_persistent_fault_becomes_model_error(
    fake: FakeAnthropic, model: ClaudeChatModel, fault: Reply, user_message: str
) -> None:
    fake.enqueue(fault, times=2)
    with pytest.raises(ModelError) as caught:
        await collect(chat(model))
    assert caught.value.user_message == user_message
    assert len(fake.requests) == 2  # the first try and max_retries=1


@pytest.mark.parametrize(
    ("fault", "user_message"),
    [
        (rate_limited(retry_after_s=40), "try again in 40 seconds."),
        (rate_limited(retry_after_s=150), "try again in 3 minutes."),
        (
            stream_error("Hello", after_chunks=1, error_type="rate_limit_error"),
            "try again in a minute.",
        ),
    ],
)
async def test_a_rate_limit_is_said_as_one_with_when_to_retry(
    fake: FakeAnthropic, fault: Reply, user_message: str
) -> None:
    """A 429 (or an in-stream ``rate_limit_error``) is a rate limit, never "overloaded",
    with the wait its ``retry-after`` gives (no retry here: the SDK waits up to 60 s)."""
    fake.enqueue(fault)
    async with make_model(fake.base_url, max_retries=0) as claude:
        with pytest.raises(ModelError) as caught:
            await collect(chat(claude))
    message = caught.value.user_message
    assert message == "Claude's rate limit for this bot was reached; " + user_message
    assert "overloaded" not in message and caught.value.retryable


def test_retry_after_reads_every_header_form() -> None:
    now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert retry_after_s({"retry-after": "12"}, now=now) == 12
    assert retry_after_s({"retry-after-ms": "2500", "retry-after": "9"}, now=now) == 2.5
    assert retry_after_s({"retry-after": "Sat, 05 Dec 2026 12:01:30 GMT"}, now=now) == 90
    reset = {
        "anthropic-ratelimit-requests-reset": "2026-12-05T12:00:45Z",
        "anthropic-ratelimit-tokens-reset": "2026-12-05T12:00:20Z",
    }
    assert retry_after_s(reset, now=now) == 20
    for junk in ({"retry-after": "soon"}, {"anthropic-ratelimit-tokens-reset": "?"}, {}, None):
        assert retry_after_s(junk, now=now) is None


@pytest.mark.parametrize("mode", ["eof", "abort"])
async def test_cut_stream_raises_with_partial_text(
    fake: FakeAnthropic, model: ClaudeChatModel, mode: Literal["eof", "abort"]
) -> None:
    fake.enqueue(cut_stream("Your favourite drink is green tea.", after_chunks=3, mode=mode))
    received: list[str] = []

    async def consume() -> None:
        async for delta in chat(model):
            received.append(delta)

    with pytest.raises(StreamCutError) as caught:
        await consume()
    assert caught.value.partial == "Your favouri"
    assert "".join(received) == "Your favouri"
    assert len(fake.requests) == 1


async def test_error_event_inside_the_stream(fake: FakeAnthropic, model: ClaudeChatModel) -> None:
    fake.enqueue(stream_error("Partial answer that stops", after_chunks=2))
    with pytest.raises(ModelError) as caught:
        await collect(chat(model))
    assert not isinstance(caught.value, StreamCutError)
    assert caught.value.user_message == "Claude is overloaded, try again in a minute."
    assert len(fake.requests) == 1  # an in-stream error is not retried


async def test_abandoned_stream_closes_cleanly(fake: FakeAnthropic, model: ClaudeChatModel) -> None:
    fake.enqueue(Reply(text="a long answer " * 20, chunk_delay_s=0.01))
    stream = chat(model)
    assert await anext(stream)
    await stream.aclose()
    await stream.aclose()
    # What the API reported before the stop (message_start) is kept: usage counts it.
    assert stream.usage is not None and stream.usage.input_tokens > 0


# --- extraction


async def test_extract_request_shape_and_value(fake: FakeAnthropic, model: ClaudeChatModel) -> None:
    answer = {"facts": [{"text": "likes green tea", "confidence": 0.9}], "summary": None}
    fake.enqueue(answer, kind="extract")
    result = await model.extract(
        system="Extract facts.", prompt="I like green tea.", output=Facts, call="reflection"
    )
    assert result.value == Facts(facts=[Fact(text="likes green tea", confidence=0.9)])
    (sent,) = fake.requests
    assert sent.kind == "extract"
    body = sent.body
    assert body["model"] == REFLECTION_MODEL
    assert body["max_tokens"] == 512
    assert body["thinking"] == {"type": "disabled"}
    assert "stream" not in body
    assert body["system"] == "Extract facts."
    assert body["messages"] == [{"role": "user", "content": "I like green tea."}]
    schema = sent.output_schema
    assert schema is not None
    nodes = list(schema_nodes(schema))
    objects = [n for n in nodes if n.get("type") == "object"]
    assert len(objects) == 2
    assert all(n["additionalProperties"] is False for n in objects)
    assert not any(REFUSED_SCHEMA_KEYWORDS & n.keys() for n in nodes)
    assert result.usage == Usage(
        input_tokens=count_tokens("Extract facts.") + count_tokens("I like green tea."),
        output_tokens=count_tokens(json.dumps(answer)),
    )


async def test_extract_default_reply_is_schema_valid(
    fake: FakeAnthropic, model: ClaudeChatModel
) -> None:
    result = await model.extract(
        system="Extract.", prompt="Nothing here.", output=Facts, call="reflection"
    )
    assert result.value == Facts(facts=[])


async def test_fake_refuses_constrained_schema(fake: FakeAnthropic) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=fake.base_url, api_key="k", max_retries=0
    ) as client:
        with pytest.raises(anthropic.BadRequestError, match="maxLength"):
            await client.messages.create(
                model=REFLECTION_MODEL,
                max_tokens=100,
                messages=[{"role": "user", "content": "x"}],
                output_config={
                    "format": {
                        "type": "json_schema",
                        "schema": {
                            "type": "object",
                            "properties": {"text": {"type": "string", "maxLength": 40}},
                            "additionalProperties": False,
                        },
                    }
                },
            )
        with pytest.raises(anthropic.BadRequestError, match="additionalProperties"):
            await client.messages.create(
                model=REFLECTION_MODEL,
                max_tokens=100,
                messages=[{"role": "user", "content": "x"}],
                output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
            )
        with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
            await client.messages.create(
                model=REFLECTION_MODEL, max_tokens=0, messages=[{"role": "user", "content": "x"}]
            )


async def test_untransformed_schema_would_be_refused(
    fake: FakeAnthropic, model: ClaudeChatModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core.model.claude, "_schema", lambda output: output.model_json_schema())
    with pytest.raises(ModelError) as caught:
        await model.extract(system="Extract.", prompt="x", output=Facts, call="reflection")
    assert caught.value.user_message == "Claude refused the request."
    assert [r.status for r in fake.requests] == [400]


@pytest.mark.parametrize(
    "reply",
    [
        not_json(),
        '{"facts": [{"text": "likes green tea", "confidence": 0.9}',  # truncated
        json.dumps({"facts": [{"text": "x" * 41, "confidence": 0.5}]}),  # max_length
        json.dumps({"facts": [{"text": "x", "confidence": 2}]}),  # le=1
    ],
)
async def test_malformed_structured_output(
    fake: FakeAnthropic, model: ClaudeChatModel, reply: Reply | str
) -> None:
    fake.enqueue(reply, kind="extract")
    with pytest.raises(MalformedOutput) as caught:
        await model.extract(system="Extract.", prompt="x", output=Facts, call="reflection")
    assert "xxxx" not in str(caught.value)  # no model text in the message
    assert caught.value.user_message == "Claude's answer was not in the expected format."


async def test_extract_server_error_then_success(
    fake: FakeAnthropic, model: ClaudeChatModel
) -> None:
    fake.enqueue(server_error(retry_after_s=0.01), {"facts": []}, kind="extract")
    result = await model.extract(system="Extract.", prompt="x", output=Facts, call="reflection")
    assert result.value == Facts(facts=[])
    assert [r.status for r in fake.requests] == [500, 200]


async def test_slow_reflection_times_out(fake: FakeAnthropic) -> None:
    fake.enqueue(slow({"facts": []}, delay_s=30), kind="extract")
    async with make_model(fake.base_url, timeout_s=0.2, max_retries=0) as claude:
        with pytest.raises(ModelError) as caught:
            await claude.extract(system="Extract.", prompt="x", output=Facts, call="reflection")
    assert caught.value.user_message == "Claude timed out."


async def test_responder_oracle_answers_by_kind(
    fake: FakeAnthropic, model: ClaudeChatModel
) -> None:
    async def oracle(body: dict[str, Any]) -> Reply | dict[str, Any]:
        await asyncio.sleep(0)
        if "output_config" in body:
            return {"facts": [{"text": body["messages"][-1]["content"], "confidence": 1}]}
        return Reply(text="chat:" + body["messages"][-1]["content"])

    fake.responder = oracle
    assert "".join(await collect(chat(model, "ping"))) == "chat:ping"
    result = await model.extract(system="Extract.", prompt="tea", output=Facts, call="reflection")
    assert result.value.facts[0].text == "tea"


# --- connection-level failures and construction


async def test_first_token_delay_beyond_timeout() -> None:
    async with running_fake_anthropic(first_token_delay_s=5) as server:
        claude = make_model(server.base_url, timeout_s=0.2, max_retries=0)
        async with claude:
            with pytest.raises(ModelError) as caught:
                await collect(chat(claude))
    assert not isinstance(caught.value, StreamCutError)
    assert caught.value.user_message == "Claude timed out."


async def test_from_settings(fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        ClaudeChatModel.from_settings(Settings(_env_file=None))  # type: ignore[call-arg]
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        anthropic_api_key="from-settings",
        anthropic_base_url=fake.base_url,
        chat_model=CHAT_MODEL,
        max_tokens=1234,
    )
    async with ClaudeChatModel.from_settings(settings) as claude:
        await collect(chat(claude))
    assert fake.requests[0].headers["authorization"] == "Bearer from-settings"
    assert fake.requests[0].body["max_tokens"] == 1234


async def test_refused_api_key() -> None:
    async with running_fake_anthropic(api_key="the-right-key") as server:
        async with make_model(server.base_url, api_key="a-wrong-key") as claude:
            with pytest.raises(ModelError) as caught:
                await collect(chat(claude))
        assert [r.status for r in server.requests] == [401]
    assert caught.value.user_message == (
        "The API key was refused; an admin must fix ANTHROPIC_API_KEY."
    )


async def test_unreachable_api() -> None:
    async with running_fake_anthropic() as server:
        closed_url = server.base_url
    async with make_model(closed_url, max_retries=0) as claude:
        with pytest.raises(ModelError) as caught:
            await claude.extract(system="Extract.", prompt="x", output=Facts, call="reflection")
    assert caught.value.user_message == "I can't reach Claude right now."


# --- the fake as a separate process (benchmarks start it this way)


@pytest.mark.slow
async def test_fake_runs_as_a_process() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakes.anthropic_server",
        "--port",
        "0",
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        base_url = (await asyncio.wait_for(process.stdout.readline(), 10)).decode().strip()
        assert base_url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession(base_url) as control:
            spec = {"text": "from the queue", "kind": "chat"}
            async with control.post("/_fake/enqueue", json=spec) as response:
                assert response.status == 200
            async with make_model(base_url) as claude:
                assert "".join(await collect(chat(claude))) == "from the queue"
            async with control.get("/_fake/requests") as response:
                recorded = await response.json()
        assert recorded[-1]["body"]["thinking"] == {"type": "adaptive"}
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 10) == 0
