"""Streamed replies in simulated time: edit counts, roll-over, and a shared Slack budget.

    python bench/stream.py [--json] [--chars 6000] [--duration-s 30] [--replies 10]

A Markdown answer (paragraphs, lists, a code block, emoji, CJK) arrives token by token,
evenly over ``--duration-s`` seconds of simulated time, through :func:`core.streaming.reply.
stream_reply` into a fake Slack workspace. The fake refuses a ``chat.update`` beyond
``--updates-per-minute`` in any 60-second window with ``RateLimited`` (HTTP 429), as Slack's
tier 3 does (https://api.slack.com/methods/chat.update). Three runs:

- ``single``: one reply (the edit throttle alone: at most ``duration / interval + 1`` edits);
- ``shared budget``: ``--replies`` concurrent replies in one workspace sharing
  :class:`core.streaming.reply.EditBudgets` (they should see no 429);
- ``no budget``: the same load without it (for comparison: 429s, waited out).

Then one answer (``--chars`` over ``--duration-s``) into a Slack thread twice, through the
real :class:`bots.slack_bot.sink.SlackReplySink` over a Web API client that records calls
instead of sending them: ``native`` (:class:`core.streaming.native.NativeReply`, slack_sdk's
own ``AsyncChatStream`` buffering: ``chat.startStream`` / ``appendStream`` / ``stopStream``)
and ``edits`` (``chat.postMessage`` + ``chat.update``, the edit throttle). The table shows the
Web API calls each made and whether the final text is exact; JSON adds ``native_calls``,
``edits_calls``. Both end with the feedback buttons on the last message, as the bot sends
them (``chat.stopStream`` blocks; the final ``chat.update`` as a markdown block plus the
buttons): no call of its own.

The event loop runs on virtual time (its clock jumps to the next timer when idle), so the
whole bench takes about a second. The last line is JSON: ``max_edits_per_message`` (single and
shared-budget runs), ``messages`` (per reply), ``final_text_exact`` (every run: the
platform's final texts, added fence lines aside, concatenate to the answer and hold no
"still writing" marker), ``concurrent_replies`` and ``rate_limited`` (429s in the
shared-budget run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slack_sdk.web.async_chat_stream import AsyncChatStream

from bots.slack_bot.blocks import feedback_blocks
from bots.slack_bot.platform import edit_budgets, stream_config
from bots.slack_bot.sink import SlackReplySink, StreamingSupport
from core.streaming.native import NativeReply
from core.streaming.reply import (
    DEFAULT_WRITING_MARKER,
    ReplyResult,
    stream_reply,
)
from tests.fakes.virtual_time import SlackLikeWorkspace, now, run_virtual

FENCE_OPENING = re.compile(r"(`{3,}|~{3,})[^`\n]*\n")
FENCE_CLOSING = re.compile(r"\n?(`{3,}|~{3,})")


@dataclass
class FakeSlackThread:
    """A ReplySink for one thread: keeps each message's text and counts its edits."""

    workspace: SlackLikeWorkspace
    max_chars: int
    texts: dict[str, str] = field(default_factory=dict)
    edits: dict[str, int] = field(default_factory=dict)

    async def post(self, *, text: str) -> str:
        if not 0 < len(text) <= self.max_chars:
            raise ValueError(f"bad message length {len(text)}")
        handle = f"{len(self.texts) + 1}"
        self.texts[handle], self.edits[handle] = text, 0
        return handle

    async def edit(self, *, handle: str, text: str) -> None:
        if not 0 < len(text) <= self.max_chars:
            raise ValueError(f"bad message length {len(text)}")
        self.workspace.check_edit()
        self.texts[handle] = text
        self.edits[handle] += 1

    async def status(self, *, text: str | None) -> None:
        return None


def make_answer(rng: random.Random, chars: int) -> str:
    words = ["memory", "recall", "thread", "Claude", "naïve", "résumé", "日本語", "中文", "🎉"]
    parts: list[str] = []
    code_done = False
    while sum(map(len, parts)) < chars:
        roll = rng.random()
        if roll < 0.15 and not code_done:
            lines = "".join(f"    total_{i} = add(total_{i - 1}, {i})  # {i}\n" for i in range(70))
            parts.append(f"```python\ndef run():\n{lines}```\n\n")
            code_done = True
        elif roll < 0.3:
            items = "".join(f"- **{rng.choice(words)}**: {rng.choice(words)}\n" for _ in range(5))
            parts.append(items + "\n")
        else:
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(15, 90)))
            parts.append(sentence + rng.choice([".\n\n", ".\n", ". "]))
    return "".join(parts)[:chars]


async def timed_tokens(answer: str, rng: random.Random, duration_s: float) -> AsyncIterator[str]:
    tokens, pos = [], 0
    while pos < len(answer):
        size = rng.randint(2, 6)
        tokens.append(answer[pos : pos + size])
        pos += size
    for token in tokens:
        await asyncio.sleep(duration_s / len(tokens))
        yield token


def final_text_exact(result: ReplyResult, thread: FakeSlackThread, answer: str) -> bool:
    """The platform's final texts, added fence lines aside, concatenate to the answer."""
    pieces = []
    for message in result.messages:
        text = thread.texts[message.handle]
        body = answer[message.start : message.end]
        prefix = "" if text.startswith(body) else text[: text.find("\n") + 1]
        suffix = text[len(prefix) + len(body) :]
        if not (
            text[len(prefix) :].startswith(body)
            and (not prefix or FENCE_OPENING.fullmatch(prefix))
            and (not suffix or FENCE_CLOSING.fullmatch(suffix))
            and DEFAULT_WRITING_MARKER not in text
        ):
            return False
        pieces.append(body)
    return "".join(pieces) == answer and result.text == answer


@dataclass
class Run:
    name: str
    replies: int
    messages_per_reply: int
    max_edits_per_message: int
    edits: int
    rate_limited: int
    exact: bool
    simulated_s: float


def run(name: str, args: argparse.Namespace, *, replies: int, budget: bool) -> Run:
    async def main() -> Run:
        workspace = SlackLikeWorkspace(limit=args.updates_per_minute)
        budgets = edit_budgets(updates_per_minute=args.updates_per_minute)
        config = stream_config(max_chars=args.max_chars, edit_interval_s=args.edit_interval_s)
        rng = random.Random(args.seed)
        answers = [make_answer(rng, args.chars) for _ in range(replies)]
        threads = [FakeSlackThread(workspace, args.max_chars) for _ in range(replies)]

        async def one(thread: FakeSlackThread, answer: str, seed: int) -> ReplyResult:
            deltas = timed_tokens(answer, random.Random(seed), args.duration_s)
            limiter = budgets.for_scope("slack:T1") if budget else None
            return await stream_reply(thread, deltas, config, limiter=limiter)

        results = await asyncio.gather(
            *(one(t, a, i) for i, (t, a) in enumerate(zip(threads, answers, strict=True)))
        )
        edit_counts = [n for thread in threads for n in thread.edits.values()]
        return Run(
            name=name,
            replies=replies,
            messages_per_reply=max(len(result.messages) for result in results),
            max_edits_per_message=max(edit_counts),
            edits=sum(edit_counts),
            rate_limited=workspace.rate_limited,
            exact=all(
                final_text_exact(r, t, a) for r, t, a in zip(results, threads, answers, strict=True)
            ),
            simulated_s=now(),
        )

    return run_virtual(main())


class RecordingWebClient:
    """The slice of ``AsyncWebClient`` a reply uses, recording calls instead of sending them;
    ``chat_stream`` builds slack_sdk's real ``AsyncChatStream`` over it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.texts: dict[str, str] = {}
        self.chars_sent = 0

    def _ts(self) -> str:
        return f"1700000000.{len(self.texts) + 1:06d}"

    @staticmethod
    def _markdown(kwargs: dict[str, object]) -> str:
        """The message's Markdown: ``markdown_text``, or its ``markdown`` block (a final
        message carrying the feedback buttons)."""
        if isinstance(kwargs.get("markdown_text"), str):
            return str(kwargs["markdown_text"])
        blocks = kwargs.get("blocks")
        assert isinstance(blocks, list)
        return "".join(b["text"] for b in blocks if b["type"] == "markdown")

    async def chat_postMessage(self, **kwargs: object) -> dict[str, object]:
        self.calls.append("chat.postMessage")
        text = self._markdown(kwargs)
        self.chars_sent += len(text)
        ts = self._ts()
        self.texts[ts] = text
        return {"ok": True, "ts": ts}

    async def chat_update(self, *, ts: str, **kwargs: object) -> dict[str, object]:
        self.calls.append("chat.update")
        text = self._markdown(kwargs)
        self.chars_sent += len(text)
        self.texts[ts] = text
        return {"ok": True, "ts": ts}

    async def chat_stream(self, **kwargs: object) -> AsyncChatStream:
        import logging

        return AsyncChatStream(
            self,  # type: ignore[arg-type]
            logger=logging.getLogger("bench"),
            buffer_size=256,
            **kwargs,  # type: ignore[arg-type]
        )

    async def chat_startStream(self, **kwargs: object) -> dict[str, object]:
        self.calls.append("chat.startStream")
        ts = self._ts()
        self.texts[ts] = self._sent(kwargs)
        return {"ok": True, "ts": ts}

    async def chat_appendStream(self, *, ts: str, **kwargs: object) -> dict[str, object]:
        self.calls.append("chat.appendStream")
        self.texts[ts] += self._sent(kwargs)
        return {"ok": True, "ts": ts}

    async def chat_stopStream(self, *, ts: str, **kwargs: object) -> dict[str, object]:
        self.calls.append("chat.stopStream")
        self.texts[ts] += self._sent(kwargs)
        return {"ok": True, "ts": ts}

    def _sent(self, kwargs: dict[str, object]) -> str:
        text = self._chunk_text(kwargs)
        self.chars_sent += len(text)
        return text

    @staticmethod
    def _chunk_text(kwargs: dict[str, object]) -> str:
        chunks = kwargs.get("chunks") or []
        assert isinstance(chunks, list)
        return "".join(c.text if hasattr(c, "text") else c["text"] for c in chunks)


@dataclass
class ModeRun:
    name: str
    calls: dict[str, int]
    chars_sent: int
    exact: bool

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def run_mode(name: str, args: argparse.Namespace) -> ModeRun:
    async def main() -> ModeRun:
        answer = make_answer(random.Random(args.seed), args.chars)
        client = RecordingWebClient()
        sink = SlackReplySink(
            client,  # type: ignore[arg-type]
            channel="C1",
            thread_ts="1699999999.000001",
            recipient_user_id="U1",
            recipient_team_id="T1",
            streaming=StreamingSupport(enabled=name == "native"),
            final_blocks=feedback_blocks(asker="U1", answers_ts="1699999999.000001"),
        )
        config = stream_config(max_chars=args.max_chars, edit_interval_s=args.edit_interval_s)
        limiter = edit_budgets(updates_per_minute=args.updates_per_minute)
        scope = limiter.for_scope("slack:T1")
        reply = NativeReply(sink, config, limiter=scope) if sink.can_stream else None
        deltas = timed_tokens(answer, random.Random(args.seed), args.duration_s)
        result = await stream_reply(sink, deltas, config, limiter=scope, reply=reply)
        counts: dict[str, int] = {}
        for call in client.calls:
            counts[call] = counts.get(call, 0) + 1
        texts = FakeSlackThread(SlackLikeWorkspace(limit=10**6), args.max_chars, client.texts)
        return ModeRun(name, counts, client.chars_sent, final_text_exact(result, texts, answer))

    return run_virtual(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="end with a JSON summary line")
    parser.add_argument("--chars", type=int, default=6000, help="answer length, characters")
    parser.add_argument("--duration-s", type=float, default=30.0, help="simulated stream time")
    parser.add_argument("--replies", type=int, default=10, help="concurrent replies")
    parser.add_argument("--edit-interval-s", type=float, default=1.0)
    parser.add_argument("--max-chars", type=int, default=3500, help="message limit")
    parser.add_argument("--updates-per-minute", type=int, default=50, help="Slack tier 3")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    runs = [
        run("single", args, replies=1, budget=True),
        run("shared budget", args, replies=args.replies, budget=True),
        run("no budget", args, replies=args.replies, budget=False),
    ]
    header = f"{'run':<14} {'replies':>7} {'msgs/reply':>10} {'max edits/msg':>13}"
    print(f"{header} {'edits':>6} {'429s':>5} {'exact':>6} {'sim s':>7}")
    for r in runs:
        print(
            f"{r.name:<14} {r.replies:>7} {r.messages_per_reply:>10} "
            f"{r.max_edits_per_message:>13} {r.edits:>6} {r.rate_limited:>5} "
            f"{r.exact!s:>6} {r.simulated_s:>7.1f}"
        )
    modes = [run_mode("native", args), run_mode("edits", args)]
    print()
    print(f"one {args.chars}-char answer over {args.duration_s:g} s into a Slack thread")
    print(f"{'mode':<8} {'API calls':>9} {'chars sent':>10} {'exact':>6}  calls")
    for m in modes:
        detail = ", ".join(f"{k} {v}" for k, v in sorted(m.calls.items()))
        print(f"{m.name:<8} {m.total:>9} {m.chars_sent:>10} {m.exact!s:>6}  {detail}")
    native, edits = modes
    print(
        f"native / edits: calls {native.total / edits.total:.2f}, "
        f"chars sent {native.chars_sent / edits.chars_sent:.2f}"
    )
    single, shared, _ = runs
    if args.json:
        summary = {
            "max_edits_per_message": max(run.max_edits_per_message for run in (single, shared)),
            "messages": single.messages_per_reply,
            "final_text_exact": all(r.exact for r in runs),
            "concurrent_replies": shared.replies,
            "rate_limited": shared.rate_limited,
            "native_calls": native.total,
            "edits_calls": edits.total,
            "native_exact": native.exact,
            "edits_exact": edits.exact,
        }
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
