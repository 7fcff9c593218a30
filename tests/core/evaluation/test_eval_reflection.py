"""``selfmind eval reflection`` against the fake Anthropic server with scripted models: the real
reflection (prompt, schema, rules check, dedupe, supersede) over a synthetic conversation
(and a LoCoMo slice when the data is present), scored offline and by a scripted judge."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest

from core.evaluation.estimate import estimate_run
from core.evaluation.judge import Judge, judge_instructions
from core.evaluation.locomo import Conversation, load_all
from core.evaluation.reflection_eval import Checkpoint, EvalRun, ModelReport, totals
from core.evaluation.suites import correction_cases, negative_cases
from core.model.claude import ClaudeChatModel
from core.store.sqlite.store import SQLiteStore
from tests.conftest import LOCOMO
from tests.eval_helpers import Behaviour, ScriptedModels, write_synthetic
from tests.fakes.anthropic_server import FakeAnthropic, count_tokens, running_fake_anthropic

MODEL = "claude-haiku-4-5"
JUDGE = "claude-opus-4-8"
KEY = "sk-ant-eval"


@pytest.fixture
def synthetic(tmp_path: Path) -> list[Conversation]:
    return load_all(write_synthetic(tmp_path / "data").parent)


def locomo_slice() -> list[Conversation]:
    for folder in (LOCOMO, Path(os.environ.get("SELFMIND_LOCOMO_DIR", "/nonexistent"))):
        if any(folder.glob("conv-*.json")):
            conv = load_all(folder, ["conv-26"])[0]
            conv.sessions = conv.sessions[:1]
            return [conv]
    pytest.skip(f"LoCoMo data not found at {LOCOMO} (or SELFMIND_LOCOMO_DIR)")


@dataclass
class Outcome:
    report: ModelReport
    run: EvalRun
    fake: FakeAnthropic
    models: ScriptedModels


@asynccontextmanager
async def fake_for(
    convs: Sequence[Conversation], behaviour: Behaviour, **options: Any
) -> AsyncIterator[tuple[FakeAnthropic, ScriptedModels]]:
    models = ScriptedModels(convs, behaviour)
    async with running_fake_anthropic(responder=models, **options) as fake:
        yield fake, models


async def evaluate(
    fake: FakeAnthropic,
    convs: Sequence[Conversation],
    tmp_path: Path,
    *,
    judge: bool = False,
    out: Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[ModelReport, EvalRun]:
    header = {"judge": judge, "convs": [c.name for c in convs]}
    checkpoint = Checkpoint.open(out, header)
    db = tmp_path / (f"{out.name}.db" if out else "eval.db")
    store = await SQLiteStore.open(str(db))
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
    model = ClaudeChatModel(
        api_key=KEY,
        base_url=fake.base_url,
        chat_model=MODEL,
        reflection_model=MODEL,
        max_tokens=1024,
        memory_max_tokens=1024,
        max_retries=0,
    )
    try:
        run = EvalRun(
            model_name=MODEL,
            model=model,
            store=store,
            checkpoint=checkpoint,
            conversations=convs,
            sessions=None,
            judge=Judge(client=client, model=JUDGE) if judge else None,
            retry_delay_s=0.0,
            should_stop=should_stop,
        )
        complete = await run.run()
        report = await totals(
            model=MODEL,
            judge_model=JUDGE if judge else None,
            checkpoint=checkpoint,
            store=store,
            conversations=convs,
            complete=complete,
        )
        return report, run
    finally:
        await model.aclose()
        await client.close()
        await store.close()


async def test_oracle_scores_full_coverage_and_support_offline(
    synthetic: list[Conversation], tmp_path: Path
) -> None:
    async with fake_for(synthetic, "oracle") as (fake, _):
        report, _ = await evaluate(fake, synthetic, tmp_path)
    t = report.total
    assert t.turns == 10 and t.failed == 0
    assert t.observations == 8 and t.covered == 8 and report.total.coverage == 1.0
    assert t.new_memories == 8 and t.support == 1.0 and t.from_other == 0
    assert t.rejected == 0 and t.duplicates == 0
    assert report.false_store_rate == 0.0
    assert report.supersede_rate == 1.0
    assert report.correction.superseded == len(correction_cases())
    assert report.by_kind == {"fact": 8}
    assert t.reflection_usage.input_tokens > 0 and t.reflection_usage.output_tokens > 0


async def test_oracle_scores_full_coverage_and_support_with_the_judge(
    synthetic: list[Conversation], tmp_path: Path
) -> None:
    async with fake_for(synthetic, "oracle") as (fake, models):
        report, _ = await evaluate(fake, synthetic, tmp_path, judge=True)
    assert models.judged == 4  # two sessions x two speakers
    assert report.total.coverage == 1.0 and report.total.support == 1.0
    assert report.total.judge_usage.output_tokens > 0


async def test_silent_model_covers_nothing(synthetic: list[Conversation], tmp_path: Path) -> None:
    for judge in (False, True):
        async with fake_for(synthetic, "silent") as (fake, _):
            report, _ = await evaluate(fake, synthetic, tmp_path / str(judge), judge=judge)
        assert report.total.covered == 0 and report.total.coverage == 0.0
        assert report.total.added == 0 and report.total.support is None
        assert report.false_store_rate == 0.0 and report.supersede_rate == 0.0


async def test_parrot_is_caught_by_support_and_the_negative_suite(
    synthetic: list[Conversation], tmp_path: Path
) -> None:
    for judge in (False, True):
        async with fake_for(synthetic, "parrot") as (fake, _):
            report, _ = await evaluate(fake, synthetic, tmp_path / str(judge), judge=judge)
        t = report.total
        assert t.new_memories >= 6
        assert t.support is not None and t.support <= 0.2
        assert t.from_other >= t.new_memories - 1
        assert report.false_store_rate is not None and report.false_store_rate >= 0.9
        assert len(report.negative.failing) == report.negative.stored


async def test_model_ignoring_corrections_fails_the_correction_suite(
    synthetic: list[Conversation], tmp_path: Path
) -> None:
    async with fake_for(synthetic, "stubborn") as (fake, _):
        report, _ = await evaluate(fake, synthetic, tmp_path)
    assert report.supersede_rate == 0.0
    assert len(report.correction.failing) == len(correction_cases())
    assert report.total.coverage == 1.0  # the rest of the oracle is intact


async def test_interrupted_and_resumed_run_equals_one_run(
    synthetic: list[Conversation], tmp_path: Path
) -> None:
    async with fake_for(synthetic, "oracle") as (fake, _):
        whole, _ = await evaluate(fake, synthetic, tmp_path / "one", judge=True)
    out = tmp_path / "two" / "run.jsonl"
    out.parent.mkdir()
    # One fake for all three parts, so the prompt cache sees what one run's would.
    async with fake_for(synthetic, "oracle") as (fake, models):
        for stop_at in (7, 40):  # mid-session, then inside the negative suite
            calls = {"n": 0}

            def stop(at: int = stop_at, calls: dict[str, int] = calls) -> bool:
                calls["n"] += 1
                return calls["n"] > at

            part, _ = await evaluate(
                fake, synthetic, out.parent, judge=True, out=out, should_stop=stop
            )
            assert not part.complete
        resumed, _ = await evaluate(fake, synthetic, out.parent, judge=True, out=out)
    assert resumed.complete
    assert models.reflected == whole.total.turns + len(negative_cases()) + len(correction_cases())
    assert resumed.as_json() == whole.as_json()
    lines = out.read_text().splitlines()
    assert len({json.loads(x)["unit"] for x in lines[1:]}) == len(lines) - 1  # no unit twice


async def test_checkpoint_of_other_options_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    Checkpoint.open(out, {"judge": True})
    with pytest.raises(ValueError, match="other options"):
        Checkpoint.open(out, {"judge": False})
    out.write_text(out.read_text() + '{"unit": "cut', encoding="utf-8")  # a line cut by a crash
    assert Checkpoint.open(out, {"judge": True}).units == {}


async def test_estimate_matches_the_fakes_counted_input(
    synthetic: list[Conversation], tmp_path: Path
) -> None:
    async with fake_for(synthetic, "oracle") as (fake, _):
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=fake.base_url)
        async with client:
            estimate = await estimate_run(
                client=client,
                model=MODEL,
                judge_model=JUDGE,
                conversations=synthetic,
                sessions=None,
            )
        assert fake.count_requests and all(r.status == 200 for r in fake.count_requests)
        assert fake.totals.requests == 0  # counting is not a Messages call
        report, _ = await evaluate(fake, synthetic, tmp_path, judge=True)
    counted = (
        fake.totals.input_tokens
        + fake.totals.cache_read_input_tokens
        + (fake.totals.cache_creation_input_tokens)
    )
    estimated = estimate.reflection_input + estimate.judge_input
    assert abs(estimated - counted) <= 0.10 * counted, (estimated, counted)
    assert estimate.reflection_calls == report.total.turns + len(negative_cases()) + len(
        correction_cases()
    )
    assert estimate.judge_calls == 4
    cost = estimate.cost(model=MODEL, judge_model=JUDGE)
    assert cost is not None and cost > 0
    assert estimate.cost(model="claude-unknown-9", judge_model=None) is None


async def test_judge_prompt_is_cached_above_the_minimum(
    synthetic: list[Conversation], tmp_path: Path
) -> None:
    async with fake_for(synthetic, "oracle") as (fake, _):
        _, run = await evaluate(fake, synthetic, tmp_path / "a", judge=True)
        judged = [
            r
            for r in fake.requests
            if isinstance(r.body["system"], list)
            and r.body["system"][0]["text"] == judge_instructions()
        ]
    rows = [r for u, r in run.checkpoint.units.items() if r["t"] == "score"]
    assert len(rows) == 4 and len(judged) == 4
    for request in judged:
        assert [b.get("cache_control") for b in request.body["system"]] == [
            {"type": "ephemeral"},
            {"type": "ephemeral"},
        ]
        assert request.body["output_config"]["format"]["type"] == "json_schema"
    # Per session: the first speaker's call writes the prefix (instructions + transcript),
    # the second reads it, when the prefix reaches the minimum; session 2 is too short.
    for first, second, request in ((rows[0], rows[1], judged[0]), (rows[2], rows[3], judged[2])):
        prefix = sum(count_tokens(b["text"]) for b in request.body["system"])
        cached = prefix >= fake.min_cache_tokens
        assert first["usage"]["cache_creation_input_tokens"] == (prefix if cached else 0)
        assert second["usage"]["cache_read_input_tokens"] == (prefix if cached else 0)
    assert rows[1]["usage"]["cache_read_input_tokens"] > 0
    # Below the model's minimum nothing is cached (the fake enforces it like the API).
    async with fake_for(synthetic, "oracle", min_cache_tokens=100_000) as (fake, _):
        _, run = await evaluate(fake, synthetic, tmp_path / "b", judge=True)
    rows = [r for r in run.checkpoint.units.values() if r["t"] == "score"]
    assert all(r["usage"]["cache_read_input_tokens"] == 0 for r in rows)
    assert all(r["usage"]["cache_creation_input_tokens"] == 0 for r in rows)


@pytest.mark.slow
async def test_locomo_slice_oracle(tmp_path: Path) -> None:
    convs = locomo_slice()
    async with fake_for(convs, "oracle") as (fake, _):
        report, _ = await evaluate(fake, convs, tmp_path, judge=True)
    t = report.total
    session = convs[0].sessions[0]
    assert t.turns == len(session.turns)
    assert t.observations == len(convs[0].observations[1])
    assert t.coverage == 1.0 and t.support == 1.0
    assert report.false_store_rate == 0.0 and report.supersede_rate == 1.0


async def test_suites_are_big_enough_and_cover_every_kind() -> None:
    negatives = negative_cases()
    assert len(negatives) >= 60 and len(correction_cases()) >= 30
    assert {c.category for c in negatives} == {
        "greeting",
        "mood",
        "one_off_task",
        "option_not_chosen",
        "assistant_suggestion",
        "hypothetical_or_question",
        "quoted_other_person",
        "joke",
    }
    assert len({c.id for c in negatives}) == len(negatives)
    assert all(c.seed != c.expected for c in correction_cases())
