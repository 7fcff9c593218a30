"""The bot's own cost per turn, and proof that reflection is off the reply path.

    python bench/turn.py [--turns 100] [--memories 2000] [--json]

Runs the real turn loop (SQLite store, BM25 recall, prompt, AsyncAnthropic streaming,
background reflection) against the fake Anthropic server started as a separate process,
answering instantly. Reports:

- overhead per turn: the turn's wall time minus the time spent waiting on the model's answer
  stream (recall, history, prompt building, store writes), p50 and p95 in ms;
- time to a complete answer with a reflection that takes 5 s against one that takes 0 s, in
  the same run; they must be within 10 % (the reply never waits for reflection). Turns are
  ``--gap-s`` apart (a user reading and typing), so a 0 s reflection's own CPU work does not
  land inside the next answer, and the two configurations take turns, so drift on a shared
  machine hits both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.chat.loop import IncomingMessage, TurnLoop
from core.memory.reflection import Reflector
from core.memory.service import MemoryService
from core.model.claude import (
    AnswerStream,
    ChatMessage,
    ChatModel,
    ClaudeChatModel,
    Extraction,
    SystemBlock,
    Usage,
)
from core.settings import load_settings
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory

REFLECTION = {
    "memories": [
        {
            "text": "The user benchmarks things.",
            "kind": "fact",
            "category": "general",
            "supersedes": [],
        }
    ]
}


def responder_instant(body: dict[str, Any]) -> Any:
    """Fake responder: short chat answers, reflections at once."""
    from tests.fakes.anthropic_server import Reply

    if body.get("output_config"):
        return json.dumps(REFLECTION)
    return Reply(text="A short answer with a few words in it. " * 4)


def responder_slow(body: dict[str, Any]) -> Any:
    """Fake responder: short chat answers, reflections after 5 s."""
    from tests.fakes.anthropic_server import Reply, slow

    if body.get("output_config"):
        return slow(json.dumps(REFLECTION), 5.0)
    return Reply(text="A short answer with a few words in it. " * 4)


@dataclass
class TimedModel:
    """Wraps a ChatModel and adds up the time its answer streams take (waiting on the API)."""

    inner: ChatModel
    waits: list[float] = field(default_factory=list)

    def stream(
        self, *, system: Sequence[SystemBlock], messages: Sequence[ChatMessage]
    ) -> AnswerStream:
        return _TimedStream(self, self.inner.stream(system=system, messages=messages))

    async def extract(self, *, system: str, prompt: str, output: Any) -> Extraction[Any]:
        return await self.inner.extract(system=system, prompt=prompt, output=output)


class _TimedStream:
    def __init__(self, owner: TimedModel, inner: AnswerStream) -> None:
        self.owner, self.inner, self.spent = owner, inner, 0.0

    def __aiter__(self) -> _TimedStream:
        return self

    async def __anext__(self) -> str:
        t0 = time.perf_counter()
        try:
            return await self.inner.__anext__()
        except StopAsyncIteration:
            self.owner.waits.append(self.spent + time.perf_counter() - t0)
            raise
        finally:
            self.spent += time.perf_counter() - t0

    @property
    def stop_reason(self) -> str | None:
        return self.inner.stop_reason

    @property
    def usage(self) -> Usage | None:
        return self.inner.usage

    async def aclose(self) -> None:
        await self.inner.aclose()


def start_fake(responder: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.anthropic_server",
            "--port",
            "0",
            "--responder",
            responder,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


class Bot:
    """One turn loop (its own store, client and fake server) that the bench drives."""

    def __init__(self, base_url: str, db: Path) -> None:
        self.settings = load_settings(
            anthropic_api_key="sk-bench", anthropic_base_url=base_url, db=str(db)
        )
        self.db = db
        self.totals: list[float] = []
        self.overheads: list[float] = []

    async def open(self, memories: int) -> None:
        self.store = await SQLiteStore.open(str(self.db))
        await self.store.add_many(
            user_key="bench:user",
            memories=[
                NewMemory(text=f"The user noted fact number {i} about topic {i % 97}.")
                for i in range(memories)
            ],
            dedupe=None,
        )
        self.claude = ClaudeChatModel.from_settings(self.settings)
        self.model = TimedModel(self.claude)
        service = MemoryService(self.store)
        self.reflector = Reflector(store=self.store, model=self.model, deduper=service.deduper)
        self.loop = TurnLoop(
            store=self.store, model=self.model, reflector=self.reflector, settings=self.settings
        )
        await self.loop.start()

    async def turn(self, i: int) -> None:
        message = IncomingMessage(
            user_key="bench:user",
            conversation_key="bench:dm",
            text=f"What did I note about topic {i % 97}? Please remind me.",
            origin="private",
            sent_at=datetime.now(UTC),
        )
        t0 = time.perf_counter()
        async for _ in self.loop.answer(message):
            pass
        total = time.perf_counter() - t0
        self.totals.append(total * 1000)
        self.overheads.append((total - self.model.waits[-1]) * 1000)

    async def close(self) -> None:
        await self.reflector.close()
        await self.claude.aclose()
        await self.store.close()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    fast_proc, fast_url = start_fake("bench.turn:responder_instant")
    slow_proc, slow_url = start_fake("bench.turn:responder_slow")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fast, slow_ = Bot(fast_url, Path(tmp) / "fast.db"), Bot(slow_url, Path(tmp) / "slow.db")
            await fast.open(args.memories)
            await slow_.open(args.memories)
            try:
                for bot in (fast, slow_):  # warm-up: imports, connection pools
                    for i in range(3):
                        await bot.turn(i)
                    bot.totals.clear()
                    bot.overheads.clear()
                # Interleaved, each going first every other turn, so drift on a shared
                # machine hits both the same.
                for i in range(args.turns):
                    for bot in (fast, slow_) if i % 2 == 0 else (slow_, fast):
                        await bot.turn(i)
                        await asyncio.sleep(args.gap_s)  # the user reads and types
            finally:
                await fast.close()
                await slow_.close()
    finally:
        for proc in (fast_proc, slow_proc):
            proc.terminate()
            proc.wait(10)
    fast_p50 = statistics.median(fast.totals)
    slow_p50 = statistics.median(slow_.totals)
    return {
        "turns": args.turns,
        "user_memories": args.memories,
        "overhead_ms_p50": round(statistics.median(fast.overheads), 2),
        "overhead_ms_p95": round(pct(fast.overheads, 95), 2),
        "answer_ms_p50_reflection_0s": round(fast_p50, 2),
        "answer_ms_p50_reflection_5s": round(slow_p50, 2),
        "ratio_5s_to_0s": round(slow_p50 / fast_p50, 3),
        "within_10_percent": abs(slow_p50 / fast_p50 - 1) <= 0.10,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--gap-s", type=float, default=0.2, help="pause between turns")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    r = asyncio.run(main_async(args))
    print(
        f"turn loop, {r['turns']} turns, user with {r['user_memories']} memories, "
        "fake answering instantly"
    )
    print(f"{'measure':<44}{'p50 ms':>10}{'p95 ms':>10}")
    print(
        f"{'bot overhead per turn (excl. model wait)':<44}"
        f"{r['overhead_ms_p50']:>10}{r['overhead_ms_p95']:>10}"
    )
    print(f"{'complete answer, reflection 0 s':<44}{r['answer_ms_p50_reflection_0s']:>10}")
    print(f"{'complete answer, reflection 5 s':<44}{r['answer_ms_p50_reflection_5s']:>10}")
    print(f"ratio {r['ratio_5s_to_0s']} (within 10 %: {r['within_10_percent']})")
    if args.json:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
