"""The fake Slack, proved with the real slack_sdk and slack_bolt clients over real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.fakes.slack_server import FakeSlack, running_fake_slack, sign

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with running_fake_slack() as server:
        yield server


@pytest.fixture
def client(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=fake.bot_token, base_url=fake.api_url)


def bolt_app(fake: FakeSlack) -> AsyncApp:
    return AsyncApp(
        client=AsyncWebClient(token=fake.bot_token, base_url=fake.api_url),
        signing_secret=fake.signing_secret,
    )


@contextlib.asynccontextmanager
async def serving(app: AsyncApp) -> AsyncIterator[str]:
    """Bolt's own aiohttp app on an ephemeral port; yields the events URL."""
    runner = web.AppRunner(app.web_app(path="/slack/events"), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
    finally:
        await runner.cleanup()


# ---- Web API ------------------------------------------------------------------------------


async def test_auth_test_reports_the_bot_identity_and_checks_tokens(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    auth = await client.auth_test()
    assert (auth["user_id"], auth["bot_id"], auth["team_id"]) == ("U0BOT", "B0BOT", "T0SELFMIND")
    assert fake.calls("auth.test")[0].headers["authorization"] == f"Bearer {fake.bot_token}"

    with pytest.raises(SlackApiError) as wrong:
        await AsyncWebClient(token="xoxb-wrong", base_url=fake.api_url).auth_test()
    assert wrong.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as bot_token:
        await client.apps_connections_open(app_token=fake.bot_token)
    assert bot_token.value.response["error"] == "not_allowed_token_type"


async def test_post_update_and_replies_keep_a_thread(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    root = fake.seed_message("D0USER", "what do you remember?")
    posted = await client.chat_postMessage(
        channel="D0USER", markdown_text="**thinking**", thread_ts=root["ts"]
    )
    assert fake.calls("chat.postMessage")[0].params["markdown_text"] == "**thinking**"
    await client.chat_update(channel="D0USER", ts=posted["ts"], markdown_text="I remember *tea*.")

    replies = await client.conversations_replies(channel="D0USER", ts=root["ts"])
    texts = [m["text"] for m in replies["messages"]]
    assert texts == ["what do you remember?", "I remember *tea*."]
    assert replies["messages"][1]["bot_id"] == "B0BOT"
    assert replies["messages"][0]["reply_count"] == 1
    ts_a, ts_b = posted["ts"], (await client.chat_postMessage(channel="C1", text="x"))["ts"]
    assert float(ts_b) > float(ts_a)
    assert len(ts_b.split(".")[1]) == 6


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"markdown_text": "**a**", "text": "a"}, "markdown_text_conflict"),
        ({"markdown_text": "**a**", "blocks": [{"type": "divider"}]}, "markdown_text_conflict"),
        ({"text": "x" * 4_001}, "msg_too_long"),
        ({"ts": "1.000001", "text": "a"}, "message_not_found"),
    ],
)
async def test_chat_update_refuses_like_slack(
    fake: FakeSlack, client: AsyncWebClient, kwargs: dict[str, Any], error: str
) -> None:
    posted = await client.chat_postMessage(channel="C1", text="hello")
    with pytest.raises(SlackApiError) as raised:
        await client.chat_update(**({"channel": "C1", "ts": posted["ts"]} | kwargs))
    assert raised.value.response["error"] == error
    assert fake.messages("C1")[0]["text"] == "hello"


async def test_ratelimited_surfaces_as_429_unless_a_retry_handler_is_installed(
    fake: FakeSlack, client: AsyncWebClient
) -> None:
    posted = await client.chat_postMessage(channel="C1", text="a")
    fake.fail_next("chat.update", error="ratelimited", retry_after=7)
    with pytest.raises(SlackApiError) as raised:
        await client.chat_update(channel="C1", ts=posted["ts"], text="b")
    assert raised.value.response.status_code == 429
    assert raised.value.response.headers["Retry-After"] == "7"
    assert raised.value.response["error"] == "ratelimited"

    retrying = AsyncWebClient(
        token=fake.bot_token,
        base_url=fake.api_url,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)],
    )
    fake.fail_next("chat.update", retry_after=0)
    await retrying.chat_update(channel="C1", ts=posted["ts"], text="c")
    assert [c.status for c in fake.calls("chat.update")] == [429, 429, 200]
    assert fake.messages("C1")[0]["text"] == "c"


async def test_scripted_errors_and_rate_limits() -> None:
    async with running_fake_slack(rate_limits={"chat.update": 2}) as fake:
        limited = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url)
        posted = await limited.chat_postMessage(channel="C1", text="a")
        fake.fail_next("chat.postMessage", error="channel_not_found", times=2)
        for _ in range(2):
            with pytest.raises(SlackApiError, match="channel_not_found"):
                await limited.chat_postMessage(channel="C1", text="b")
        await limited.chat_postMessage(channel="C1", text="c")

        await limited.chat_update(channel="C1", ts=posted["ts"], text="1")
        await limited.chat_update(channel="C1", ts=posted["ts"], text="2")
        with pytest.raises(SlackApiError) as raised:
            await limited.chat_update(channel="C1", ts=posted["ts"], text="3")
        assert raised.value.response.status_code == 429
        assert int(raised.value.response.headers["Retry-After"]) >= 59


async def test_ephemeral_delete_dm_status_and_info(fake: FakeSlack, client: AsyncWebClient) -> None:
    dm = await client.conversations_open(users="U0USER")
    assert dm["channel"]["id"] == "D0USER"
    info = await client.conversations_info(channel="D0USER")
    assert info["channel"]["is_im"] is True
    await client.chat_postEphemeral(channel="C1", user="U0USER", text="only you")
    assert fake.ephemerals[0]["to_user"] == "U0USER"
    assert fake.messages("C1") == []

    await client.assistant_threads_setStatus(
        channel_id="D0USER", thread_ts="1.000001", status="is thinking..."
    )
    assert fake.statuses == [
        {"channel_id": "D0USER", "thread_ts": "1.000001", "status": "is thinking..."}
    ]
    posted = await client.chat_postMessage(channel="C1", text="bye")
    await client.chat_delete(channel="C1", ts=posted["ts"])
    assert fake.messages("C1") == []


async def test_files_upload_v2_end_to_end(fake: FakeSlack, client: AsyncWebClient) -> None:
    root = fake.seed_message("C1", "export my memories")
    response = await client.files_upload_v2(
        channel="C1",
        content="- likes tea\n",
        filename="memories.md",
        title="Memories",
        initial_comment="Here they are.",
        thread_ts=root["ts"],
    )
    file_id = response["file"]["id"]
    upload = fake.files[file_id]
    assert (upload.content, upload.title, upload.channels) == (b"- likes tea\n", "Memories", ["C1"])
    assert fake.calls("files.getUploadURLExternal")[0].params == {
        "filename": "memories.md",
        "length": "12",
    }
    assert fake.calls("files.completeUploadExternal")[0].params["files"] == [
        {"id": file_id, "title": "Memories"}
    ]
    shared = fake.thread("C1", root["ts"])[1]
    assert (shared["text"], shared["files"][0]["id"]) == ("Here they are.", file_id)


async def test_response_url_records_posts(fake: FakeSlack) -> None:
    url = fake.new_response_url()
    assert url.startswith(f"{fake.base_url}/respond/")
    reply = await AsyncWebhookClient(url).send(text="done", response_type="ephemeral")
    assert reply.status_code == 200
    await AsyncWebhookClient(url).send_dict({"delete_original": True})
    assert fake.responses(url) == [
        {"text": "done", "response_type": "ephemeral"},
        {"delete_original": True},
    ]


# ---- Bolt, HTTP mode ----------------------------------------------------------------------


def test_sign_matches_slacks_documented_example() -> None:
    # docs.slack.dev "Verifying requests from Slack", worked example.
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T"
        b"3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&t"
        b"ext=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F9"
        b"6rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )
    headers = sign(body, "8f742231b10e8888abcd99yyyzzz85a5", 1531420618)
    assert headers["X-Slack-Signature"] == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    )


async def test_bolt_http_mode_events_commands_and_signatures(fake: FakeSlack) -> None:
    app = bolt_app(fake)
    seen: asyncio.Queue[tuple[dict[str, Any], dict[str, Any]]] = asyncio.Queue()

    @app.event("message")
    async def on_message(event: dict[str, Any], request: Any, say: Any) -> None:
        await seen.put((event, dict(request.headers)))
        await say(text=f"echo: {event['text']}", thread_ts=event["ts"])

    @app.command("/remember")
    async def on_remember(ack: Any, respond: Any, command: dict[str, Any]) -> None:
        await ack("saving")
        await respond(text=f"saved {command['text']}", response_type="ephemeral")

    async with serving(app) as url:
        first = await fake.send_event(url, fake.events.message("hello"))
        assert first.status == 200
        event, headers = await asyncio.wait_for(seen.get(), 5)
        assert (event["channel_type"], "x-slack-retry-num" in headers) == ("im", False)
        reply = await fake.wait_for_call("chat.postMessage")
        assert reply.params["thread_ts"] == event["ts"]
        assert [m["text"] for m in fake.thread("D0USER", event["ts"])] == ["hello", "echo: hello"]

        envelope = first.sent
        retried = await fake.send_event(url, envelope, retry_num=1, retry_reason="http_timeout")
        assert retried.status == 200
        _, headers = await asyncio.wait_for(seen.get(), 5)
        assert (headers["x-slack-retry-num"], headers["x-slack-retry-reason"]) == (
            ["1"],
            ["http_timeout"],
        )

        await fake.send_event(url, fake.events.bot_message("my own words"))  # ignored by Bolt
        await fake.send_event(url, fake.events.channel_message("next"))
        event, _ = await asyncio.wait_for(seen.get(), 5)
        assert event["text"] == "next"

        command = await fake.send_slash_command(url, "/remember", "tea")
        assert (command.status, command.text) == (200, "saving")  # plain text over HTTP
        respond_body = await fake.wait_for_response(command.sent["response_url"])
        assert respond_body == {"text": "saved tea", "response_type": "ephemeral"}

        for signature in ("forged", "stale", "missing"):
            refused = await fake.send_event(url, fake.events.message("x"), signature=signature)
            assert refused.status == 401, signature
    assert seen.empty()


async def test_bolt_interaction_over_http(fake: FakeSlack) -> None:
    app = bolt_app(fake)

    @app.action("forget")
    async def on_forget(ack: Any, respond: Any, body: dict[str, Any]) -> None:
        await ack()
        await respond(text=f"forgot {body['actions'][0]['value']}", replace_original=True)

    async with serving(app) as url:
        sent = await fake.send_interaction(url, fake.events.block_actions("forget", "m42"))
        assert sent.status == 200
        body = await fake.wait_for_response(sent.sent["response_url"])
    assert body == {"text": "forgot m42", "replace_original": True}


async def test_bolt_say_with_markdown_text_sends_an_empty_text_and_is_refused(
    fake: FakeSlack,
) -> None:
    app = bolt_app(fake)
    errors: asyncio.Queue[str] = asyncio.Queue()

    @app.event("message")
    async def on_message(say: Any) -> None:
        try:
            await say(markdown_text="**hi**")
        except SlackApiError as e:
            await errors.put(e.response["error"])

    async with serving(app) as url:
        await fake.send_event(url, fake.events.message("hello"))
        assert await asyncio.wait_for(errors.get(), 5) == "markdown_text_conflict"
    assert fake.calls("chat.postMessage")[0].params["text"] == ""


# ---- Bolt, Socket Mode --------------------------------------------------------------------


async def test_bolt_socket_mode_acks_envelopes_and_reconnects(fake: FakeSlack) -> None:
    app = bolt_app(fake)
    seen: asyncio.Queue[tuple[dict[str, Any], dict[str, Any]]] = asyncio.Queue()

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], request: Any) -> None:
        await seen.put((event, dict(request.headers)))

    @app.command("/remember")
    async def on_remember(ack: Any) -> None:
        await ack("saving")

    handler = AsyncSocketModeHandler(app, app_token=fake.app_token)
    await handler.connect_async()
    try:
        await fake.wait_for_socket()
        assert (
            fake.calls("apps.connections.open")[0].headers["authorization"].endswith(fake.app_token)
        )
        mention = fake.events.app_mention(f"{fake.identity.mention} hi")
        envelope_id = await fake.push_event(mention)
        assert await fake.wait_for_ack(envelope_id) == {"envelope_id": envelope_id}
        assert handler.client.last_ping_pong_time is not None  # our pong echoed its ping data
        event, headers = await asyncio.wait_for(seen.get(), 5)
        assert event["text"].endswith("hi")
        assert headers["x-slack-retry-num"] == ["0"]

        command = fake.events.slash_command("/remember", "tea")
        envelope_id = await fake.push_envelope("slash_commands", command)
        ack = await fake.wait_for_ack(envelope_id)
        assert ack["payload"] == {"text": "saving"}

        fake.bot_events.add("reaction_added")  # subscribed, but this app has no listener
        unhandled = await fake.push_event({"type": "reaction_added", "user": "U0USER"})
        with pytest.raises(TimeoutError):
            await fake.wait_for_ack(unhandled, timeout_s=0.3)

        await fake.disconnect_sockets()
        await fake.wait_for_socket(connections=2)
        envelope_id = await fake.push_event(mention, retry_attempt=1, retry_reason="timeout")
        await fake.wait_for_ack(envelope_id)
        _, headers = await asyncio.wait_for(seen.get(), 5)
        assert headers["x-slack-retry-num"] == ["1"]
        await fake.drop_sockets()
        await fake.wait_for_socket(connections=3)
        assert len(fake.calls("apps.connections.open")) == 3
    finally:
        await handler.close_async()


# ---- as a separate process ----------------------------------------------------------------


@pytest.mark.slow
async def test_runs_as_a_process_until_sigterm() -> None:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakes.slack_server",
        "--port",
        "0",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        urls = json.loads(await asyncio.wait_for(proc.stdout.readline(), 10))
        client = AsyncWebClient(token="xoxb-fake-bot-token", base_url=urls["api_url"])
        await client.chat_postMessage(channel="C1", text="from a benchmark")
        base = urls["base_url"]
        async with ClientSession(raise_for_status=True) as session:
            async with session.get(f"{base}/_fake/messages?channel=C1") as resp:
                messages = (await resp.json())["messages"]
            fail = {"method": "auth.test", "error": "invalid_auth"}
            await (await session.post(f"{base}/_fake/fail", json=fail)).release()
            with pytest.raises(SlackApiError, match="invalid_auth"):
                await client.auth_test()
            async with session.get(f"{base}/_fake/calls") as resp:
                calls = (await resp.json())["calls"]
        assert [m["text"] for m in messages] == ["from a benchmark"]
        assert [c["method"] for c in calls] == ["chat.postMessage", "auth.test"]
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0
    assert time.monotonic() - started < 10


async def test_an_expired_stream_is_a_broken_pill_until_chat_update() -> None:
    async with running_fake_slack(stream_lifetime_s=300.0) as fake:
        client = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url)
        root = fake.seed_message("D1", "hi", user="U1")
        started = await client.chat_startStream(
            channel="D1", thread_ts=root["ts"], markdown_text="Half an"
        )
        ts = started["ts"]
        clock = [fake.clock()]
        fake.clock = lambda: clock[0]
        clock[0] += 299.0
        await client.chat_appendStream(channel="D1", ts=ts, markdown_text=" answer")
        clock[0] += 1.0  # python-slack-sdk #1859: Slack ends it about 5 minutes in
        (message,) = fake.thread("D1", root["ts"])[1:]
        assert message["broken_pill"] is True and message["streaming"] is False
        for call in (client.chat_appendStream, client.chat_stopStream):
            with pytest.raises(SlackApiError) as refused:
                await call(channel="D1", ts=ts, markdown_text=" more")
            assert refused.value.response["error"] == "message_not_in_streaming_state"
        assert message["broken_pill"] is True
        await client.chat_update(channel="D1", ts=ts, markdown_text="Half an answer, whole.")
        assert "broken_pill" not in message and message["markdown_text"].endswith("whole.")


# ---- limits the documentation sets (one case at the limit, taken; one past it, refused) ----
# Sources are cited where each limit is defined in tests/fakes/slack_server.py; the table in
# docs/slack.md lists them all.


def btn(text: str = "Go", value: str = "v", action_id: str = "a") -> dict[str, Any]:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "value": value,
        "action_id": action_id,
    }


def actions(*elements: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "actions", "elements": list(elements)}]


def section_with(accessory: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}, "accessory": accessory}]


def header(text: str) -> list[dict[str, Any]]:
    return [{"type": "header", "text": {"type": "plain_text", "text": text}}]


BLOCK_RULES = [
    pytest.param(actions(btn("x" * 75)), actions(btn("x" * 76)), id="button-text-75"),
    pytest.param(
        actions(btn(value="v" * 2000)),
        actions(btn(value="v" * 2001)),
        id="button-value-2000",
    ),
    pytest.param(
        actions(btn(action_id="a" * 255)),
        actions(btn(action_id="a" * 256)),
        id="button-action-id-255",
    ),
    pytest.param(
        section_with(btn("x" * 75)),
        section_with(btn("x" * 76)),
        id="accessory-button",
    ),
    pytest.param(header("h" * 150), header("h" * 151), id="header-150"),
]


@pytest.mark.parametrize(("taken", "refused"), BLOCK_RULES)
async def test_message_and_home_view_blocks_are_checked(
    fake: FakeSlack, client: AsyncWebClient, taken: list[Any], refused: list[Any]
) -> None:
    await client.chat_postMessage(channel="C1", text="t", blocks=taken)
    await client.views_publish(user_id="U1", view={"type": "home", "blocks": taken})
    with pytest.raises(SlackApiError) as posted:
        await client.chat_postMessage(channel="C1", text="t", blocks=refused)
    assert posted.value.response["error"] == "invalid_blocks"
    with pytest.raises(SlackApiError) as published:
        await client.views_publish(user_id="U1", view={"type": "home", "blocks": refused})
    assert published.value.response["error"] == "invalid_blocks"
    assert len(fake.messages("C1")) == 1


async def test_block_counts_message_50_home_view_100(client: AsyncWebClient) -> None:
    divider = {"type": "divider"}
    await client.chat_postMessage(channel="C1", text="t", blocks=[divider] * 50)
    await client.views_publish(user_id="U1", view={"type": "home", "blocks": [divider] * 100})
    for call in (
        client.chat_postMessage(channel="C1", text="t", blocks=[divider] * 51),
        client.views_publish(user_id="U1", view={"type": "home", "blocks": [divider] * 101}),
    ):
        with pytest.raises(SlackApiError) as refused:
            await call
        assert refused.value.response["error"] == "invalid_blocks"


@pytest.mark.parametrize(
    ("loading", "ok"),
    [
        (["x" * 50] * 10, True),
        (["x"] * 11, False),  # "Maximum of 10 messages"
        (["x" * 51], False),
        ([""], False),
        ("not a list", False),
    ],
    ids=["10-of-50", "11", "51-chars", "empty", "not-a-list"],
)
async def test_set_status_loading_messages_limits(
    fake: FakeSlack, client: AsyncWebClient, loading: Any, ok: bool
) -> None:
    call = client.assistant_threads_setStatus(
        channel_id="D1", thread_ts="1.000001", status="is thinking…", loading_messages=loading
    )
    if ok:
        await call
        assert fake.shown_status[("D1", "1.000001")] == "is thinking…"
        return
    with pytest.raises(SlackApiError) as refused:
        await call
    assert refused.value.response["error"] == "invalid_arguments"
    assert fake.shown_status == {}


@pytest.mark.parametrize(
    ("recipients", "error"),
    [
        ({}, "missing_recipient_user_id"),
        ({"recipient_user_id": "U1"}, "missing_recipient_team_id"),
        ({"recipient_team_id": "T1"}, "missing_recipient_user_id"),
    ],
    ids=["none", "no-team", "no-user"],
)
async def test_a_channel_stream_needs_its_recipient(
    fake: FakeSlack, client: AsyncWebClient, recipients: dict[str, str], error: str
) -> None:
    root = await client.chat_postMessage(channel="C1", text="question")
    with pytest.raises(SlackApiError) as refused:
        await client.chat_startStream(channel="C1", thread_ts=root["ts"], **recipients)
    assert refused.value.response["error"] == error
    # In a DM none is needed; in a channel both are.
    await client.chat_startStream(channel="D1", thread_ts=root["ts"])
    await client.chat_startStream(
        channel="C1", thread_ts=root["ts"], recipient_user_id="U1", recipient_team_id="T1"
    )
