"""The place rule's labelled use cases (core/data/use_cases.jsonl, category ``places: ...``,
written by scripts/place_use_cases.py): enough of them, every pair of the eight places, a
third held out, and every one passes through bench/use.py's own path (the store's filter,
the profile and recall) on both backends."""

from __future__ import annotations

from collections import Counter

from bench.use import BM25Recaller, in_prompt, load_case, load_cases, passes, prompt_context
from core.runtime import open_store

PLACES = (
    "slack DM", "slack group DM", "slack private channel", "slack public channel",
    "another workspace", "discord DM", "guild A", "guild B",
)  # fmt: skip


def place_cases() -> list[dict[str, object]]:
    return [c for c in load_cases() if str(c["category"]).startswith("places:")]


def test_every_pair_of_places_is_labelled() -> None:
    cases = place_cases()
    assert len(cases) >= 120
    held = sum(c["split"] == "held_out" for c in cases)
    assert abs(held - len(cases) / 3) <= 1
    pairs = Counter(
        (str(c["category"]).removeprefix("places: learned in "), c["message"]["asked_in"])  # type: ignore[index]
        for c in cases
    )
    slack, discord = PLACES[:5], PLACES[5:]
    assert set(pairs) == {(a, b) for g in (slack, discord) for a in g for b in g}
    assert sum(1 for c in cases if c["must"]) and sum(1 for c in cases if "t" in c["must_not"])  # type: ignore[operator]


async def test_every_place_case_passes(db_url: str) -> None:
    store = await open_store(db_url)
    try:
        recaller = BM25Recaller(store)
        failed = []
        for case in place_cases():
            loaded = await load_case(store, case)
            context = await prompt_context(recaller, store, loaded)
            if not passes(loaded, in_prompt(context)):
                failed.append(case["id"])
        assert failed == []
    finally:
        await store.close()
