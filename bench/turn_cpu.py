"""The bot's CPU for each part of one turn, measured on the calling thread alone.

    python bench/turn_cpu.py [--repeat 300]

The fake Slack and the fake Anthropic server run on their own event loop in another thread,
so ``time.thread_time()`` around each call counts only the bot's side: the SDK clients, the
HTTP clients, JSON and logging. Each part is timed ``--repeat`` times after a warm-up and
reported as the median microseconds per call:

- ``answer stream``: ``ClaudeChatModel.stream`` of a 36-character answer in 4-character
  deltas (bench/load.py's answer), read to the end;
- ``reflection call``: ``ClaudeChatModel.extract`` of the reflection's output model;
- ``chat.postMessage`` / ``chat.update``: the answer's post and one edit through the bot's
  ``stream_client`` (slack_sdk over aiohttp);
- ``event dispatch``: one signed ``message`` event through the bot's HTTP route (signature,
  Bolt's middleware and listener matching), the listener doing nothing;
- ``log line``: one INFO record to a stream handler.

A turn of bench/load.py makes one of the first two, one post and about five edits (50 ms
edit interval), one dispatch and a handful of log lines.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import ClientSession

from core.memory.reflection import ReflectionOutput
from core.model.claude import ChatMessage, ClaudeChatModel, SystemBlock
from tests.fakes.anthropic_server import FakeAnthropic, Reply
from tests.fakes.slack_server import FakeSlack

ANSWER = "Answer L1x1: fine, noted and done."


class Fakes:
    """Both fakes on an event loop of their own, in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.slack = FakeSlack()
        self.claude = FakeAnthropic(chunk_size=4, responder=self.respond)
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.slack.start(), self.loop).result()
        asyncio.run_coroutine_threadsafe(self.claude.start(), self.loop).result()

    @staticmethod
    def respond(body: dict[str, Any]) -> Reply:
        if body.get("output_config"):
            return Reply(text='{"memories": []}')
        return Reply(text=ANSWER)


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    for _ in range(10):
        await fn()
    samples = []
    for _ in range(repeat):
        t0 = time.thread_time()
        await fn()
        samples.append(time.thread_time() - t0)
    return statistics.median(samples) * 1e6


async def run(repeat: int) -> list[tuple[str, float]]:
    from bots.slack_bot.app import web_clients
    from core.settings import Settings

    fakes = Fakes()
    settings = Settings(_env_file=None, slack_api_url=fakes.slack.api_url)  # type: ignore[call-arg]
    model = ClaudeChatModel(
        api_key="k",
        base_url=fakes.claude.base_url,
        chat_model="claude-sonnet-4-5",
        reflection_model="claude-haiku-4-5",
        max_tokens=1000,
        memory_max_tokens=1000,
    )
    system = [SystemBlock("You are a helpful assistant. " * 40, cache=True), SystemBlock("m")]
    history = [
        ChatMessage("user" if i % 2 == 0 else "assistant", "some words " * 10) for i in range(12)
    ]

    async def stream() -> None:
        async for _ in model.stream(system=system, messages=history):
            pass

    async def extract() -> None:
        await model.extract(
            system="reflect " * 200,
            prompt="the turn " * 100,
            output=ReflectionOutput,
            call="reflection",
        )

    rows: list[tuple[str, float]] = []
    async with ClientSession() as session:
        _, stream_client = web_clients(settings, fakes.slack.bot_token, session)
        posted = await stream_client.chat_postMessage(channel="D1", markdown_text="Answer")
        ts = str(posted["ts"])

        async def post() -> None:
            await stream_client.chat_postMessage(channel="D1", markdown_text=ANSWER)

        async def edit() -> None:
            await stream_client.chat_update(channel="D1", ts=ts, markdown_text=ANSWER)

        log = logging.getLogger("bench.turn_cpu")
        log.propagate = False
        log.addHandler(logging.StreamHandler(io.StringIO()))
        log.setLevel(logging.INFO)

        async def log_line() -> None:
            log.info("turn=%s user=%s conversation=%s recalled=%d", 1, "slack:T:U", "slack:T:D", 3)

        rows.append(("answer stream", await timed(stream, repeat)))
        rows.append(("reflection call", await timed(extract, repeat)))
        rows.append(("chat.postMessage", await timed(post, repeat)))
        rows.append(("chat.update", await timed(edit, repeat)))
        rows.append(
            ("event dispatch", await timed(dispatcher(fakes, settings, session, repeat), repeat))
        )
        rows.append(("log line", await timed(log_line, repeat)))
    await model.aclose()
    return rows


def dispatcher(
    fakes: Fakes, settings: Any, session: ClientSession, repeat: int
) -> Callable[[], Awaitable[Any]]:
    """One signed DM event through SlackBot's HTTP route with a listener that does nothing."""
    import json

    from aiohttp.test_utils import make_mocked_request
    from slack_sdk.signature import SignatureVerifier

    from bots.slack_bot.app import SlackBot, web_clients
    from bots.slack_bot.events import BotIdentity

    class _Bot(SlackBot):
        def __init__(self) -> None:  # only what the HTTP route needs
            client, _ = web_clients(settings, fakes.slack.bot_token, session)
            self.settings, self.client, self._token = settings, client, client.token
            self.identity = BotIdentity(team_id="T1", user_id="UBOT", bot_id="B1")
            self._verifier = SignatureVerifier(fakes.slack.signing_secret)
            self.app = self._build_app_min(fakes.slack.signing_secret)

        def _build_app_min(self, secret: str) -> Any:
            from slack_bolt.async_app import AsyncApp

            from bots.slack_bot.app import fixed_authorize

            app = AsyncApp(
                process_before_response=True,
                signing_secret=secret,
                client=self.client,
                authorize=fixed_authorize(self.identity, self._token),
            )

            async def noop(body: Any) -> None:
                return None

            app.event("message")(noop)
            return app

    bot = _Bot()
    event = fakes.slack.events.message("hello there", user="U1")
    body = json.dumps(fakes.slack.events.event_callback(event, event_id="Ev1"))
    verifier = SignatureVerifier(fakes.slack.signing_secret)

    def request() -> Any:
        stamp = str(int(time.time()))
        headers = {
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": verifier.generate_signature(timestamp=stamp, body=body),
            "Content-Type": "application/json",
        }
        made = make_mocked_request("POST", "/slack/events", headers=headers)
        raw = body.encode()

        async def read() -> bytes:
            return raw

        made.read = read
        return made

    # Built before the timing starts: a mocked request costs more than the dispatch.
    requests = [request() for _ in range(repeat + 20)]

    async def once() -> None:
        response = await bot._http_events(requests.pop())
        assert response.status == 200, response.status

    return once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    rows = asyncio.run(run(args.repeat))
    print(f"{'part':<20}{'CPU us/call':>12}")
    for name, us in rows:
        print(f"{name:<20}{us:>12.0f}")


if __name__ == "__main__":
    main()
