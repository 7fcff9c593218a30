"""The bot's own cost per turn, and proof that reflection is off the reply path.

    python bench/turn.py [--turns 100] [--memories 2000] [--json]
    python bench/turn.py --recall-log [--turns 200] [--memories 2000] [--json]

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

With ``--recall-log``, instead: the bot's overhead per turn with the recall log (each
delivered answer's ``finish_turn`` upserts the recalls of the memories its prompt carried)
against the same loop whose store drops them (the baseline switch:
:class:`NoRecallLogStore`), two stores side by side on one fake, interleaved the same way; the
ratio of their p50 and p95 overheads is the log's cost. The user's memories make a profile
over the budget and recall fills ``top_k`` each turn, so every turn records about 10 ids.
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
from core.types import CallKind, NewMemory, NewTurn

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

    async def extract(
        self, *, system: str, prompt: str, output: Any, call: CallKind
    ) -> Extraction[Any]:
        return await self.inner.extract(system=system, prompt=prompt, output=output, call=call)


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


class NoRecallLogStore(SQLiteStore):
    """The baseline: the same store, its turns' recalls never recorded."""

    async def finish_turn(self, *, recalled: Sequence[int] = (), **kwargs: Any) -> int | None:
        return await super().finish_turn(**kwargs)


class Bot:
    """One turn loop (its own store, client and fake server) that the bench drives."""

    def __init__(
        self, base_url: str, db: Path, store_class: type[SQLiteStore] = SQLiteStore
    ) -> None:
        self.store_class = store_class
        self.settings = load_settings(
            anthropic_api_key="sk-bench", anthropic_base_url=base_url, db=str(db)
        )
        self.db = db
        self.totals: list[float] = []
        self.overheads: list[float] = []

    async def open(self, memories: int) -> None:
        self.store = await self.store_class.open(str(self.db))
        await self.store.add_many(
            user_key="bench:user",
            memories=[
                NewMemory(text=f"The user noted fact number {i} about topic {i % 97}.")
                for i in range(memories)
            ]
            + [
                NewMemory(text=f"The user prefers tool number {i} for task {i}.", kind="preference")
                for i in range(40)
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


async def recall_log_async(args: argparse.Namespace) -> dict[str, Any]:
    proc, url = start_fake("bench.turn:responder_instant")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            logged = Bot(url, Path(tmp) / "logged.db")
            baseline = Bot(url, Path(tmp) / "baseline.db", NoRecallLogStore)
            bots = (logged, baseline)
            for bot in bots:
                await bot.open(args.memories)
            try:
                for bot in bots:
                    for i in range(3):
                        await bot.turn(i)
                    bot.totals.clear()
                    bot.overheads.clear()
                for i in range(args.turns):
                    for bot in bots if i % 2 == 0 else bots[::-1]:
                        await bot.turn(i)
                        await asyncio.sleep(args.gap_s)
                uses = await logged.store.memory_uses(user_key="bench:user")
                recorded = sum(u.recalls for u in uses.values())
                finish = await finish_turn_ms(logged.store, list(uses), args.turns)
                base_uses = await baseline.store.memory_uses(user_key="bench:user")
                assert sum(u.recalls for u in base_uses.values()) == 0
            finally:
                for bot in bots:
                    await bot.close()
    finally:
        proc.terminate()
        proc.wait(10)
    turns = args.turns + 3
    out: dict[str, Any] = {"turns": args.turns, "user_memories": args.memories + 40}
    out["ids_recorded_per_turn"] = round(recorded / turns, 1)
    for name, bot in (("recall_log", logged), ("baseline", baseline)):
        out[f"overhead_ms_p50_{name}"] = round(statistics.median(bot.overheads), 2)
        out[f"overhead_ms_p95_{name}"] = round(pct(bot.overheads, 95), 2)
    for p in ("p50", "p95"):
        out[f"ratio_{p}"] = round(
            out[f"overhead_ms_{p}_recall_log"] / out[f"overhead_ms_{p}_baseline"], 3
        )
    out["finish_turn_ms_p50"] = finish
    out["finish_turn_ratio"] = round(finish["recall_log"] / finish["baseline"], 3)
    return out


async def finish_turn_ms(store: SQLiteStore, ids: list[int], n: int) -> dict[str, float]:
    """Median ms of ``finish_turn`` alone (its one transaction, fsync included) with the
    recalls of ``ids`` and without, alternating, ``n`` each."""
    times: dict[str, list[float]] = {"recall_log": [], "baseline": []}
    for i in range(2 * n):
        name = "recall_log" if i % 2 == 0 else "baseline"
        turn_id = await store.add_turn(
            turn=NewTurn(
                conversation_key="bench:finish", user_key="bench:user", role="user",
                text="Hello?", origin="private", sent_at=datetime.now(UTC),
                reflection="answering",
            )
        )  # fmt: skip
        t0 = time.perf_counter()
        await store.finish_turn(
            turn_id=turn_id, answer="Hi.", reflect=False, recalled=ids if i % 2 == 0 else ()
        )
        times[name].append((time.perf_counter() - t0) * 1000)
    return {k: round(statistics.median(v), 3) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recall-log", action="store_true", help="the recall log's cost")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--gap-s", type=float, default=0.2, help="pause between turns")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.recall_log:
        r = asyncio.run(recall_log_async(args))
        print(
            f"turn loop, {r['turns']} turns each, user with {r['user_memories']} memories,"
            f" {r['ids_recorded_per_turn']} memory ids recorded per turn"
        )
        print(f"{'bot overhead per turn (excl. model wait)':<44}{'p50 ms':>10}{'p95 ms':>10}")
        for name in ("recall_log", "baseline"):
            print(f"{name:<44}{r[f'overhead_ms_p50_{name}']:>10}{r[f'overhead_ms_p95_{name}']:>10}")
        print(f"{'ratio recall_log / baseline':<44}{r['ratio_p50']:>10}{r['ratio_p95']:>10}")
        f = r["finish_turn_ms_p50"]
        print(
            f"finish_turn alone, p50: {f['recall_log']} ms with the record of"
            f" {len(r.get('ids', [])) or r['ids_recorded_per_turn']} ids, {f['baseline']} ms"
            f" without (ratio {r['finish_turn_ratio']})"
        )
        if args.json:
            print(json.dumps(r))
        return
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
