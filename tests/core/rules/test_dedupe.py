"""Dedupe: the rule held to the labelled set, the issue's pairs on both backends, and
supersede applied before dedupe on the reflection path."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench import dedupe as dedupe_bench
from core.evaluation.dedupe import evaluate, format_table, load_pairs, parse_pairs
from core.memory.service import MemoryService
from core.rules.dedupe import (
    DEFAULT_THRESHOLD,
    Deduper,
    carries_new_information,
    difference,
    jaccard,
)
from core.rules.text import normalize, words
from core.store.seams import Store
from core.types import Memory, NewMemory, utcnow
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import dm, harness, memories_reply

ALICE = "slack:T1:UALICE"
ROOT = Path(__file__).resolve().parents[3]


def mem(text: str, memory_id: int = 1) -> Memory:
    now = utcnow()
    return Memory(memory_id, "cli:a", text, "fact", "general", "remember", "private", now, now)


# ---------------------------------------------------------------- the labelled set
def test_rule_holds_to_the_labelled_set() -> None:
    pairs = load_pairs()
    report = evaluate(pairs)
    rule = report.methods[0]
    assert rule == f"rule@{DEFAULT_THRESHOLD:g}"
    everything = report.score(rule, "all")
    assert everything.false_merges == 0, everything.false_merge_ids
    assert everything.recall >= 0.90, everything.missed_ids
    # The pairs discriminate: plain Jaccard at the old threshold merges many distinct ones.
    assert report.score("jaccard@0.7", "all").false_merges > 50


def test_labelled_set_shape() -> None:
    pairs = load_pairs()
    assert len(pairs) >= 300
    labels = Counter(p.label for p in pairs)
    assert labels["duplicate"] >= 100 and labels["distinct"] >= 100
    holdout = sum(p.split == "holdout" for p in pairs) / len(pairs)
    assert 0.30 <= holdout <= 0.36
    cases = {(p.label, p.case) for p in pairs}
    for case in ("substitution", "negation", "number", "date", "name"):
        assert ("distinct", case) in cases
    for case in ("qualifier", "stopwords", "order", "inflection"):
        assert ("duplicate", case) in cases
    texts = {(p.a, p.b, p.label) for p in pairs}
    for a, b in [
        ("The user is allergic to peanuts.", "The user is allergic to shellfish."),
        ("The user prefers dark mode in vim.", "The user prefers light mode in vim."),
        (
            "The user writes most of their services in Go.",
            "The user writes most of their services in Rust.",
        ),
        ("The user drinks tea every morning.", "The user drinks coffee every morning."),
        ("The user's team deploys on Fridays.", "The user's team deploys on Mondays."),
        ("The user lives in Berlin.", "The user lives in Munich."),
    ]:
        assert (a, b, "distinct") in texts
    assert len({p.id for p in pairs}) == len(pairs)


def test_report_per_split_and_json() -> None:
    pairs = load_pairs()
    report = evaluate(pairs, threshold=0.7, jaccard_thresholds=(0.6, 0.8))
    assert report.methods == ("rule@0.7", "jaccard@0.6", "jaccard@0.8")
    for method in report.methods:
        tune, hold, every = (report.score(method, s) for s in ("tune", "holdout", "all"))
        assert tune.false_merges + hold.false_merges == every.false_merges
        assert tune.duplicates + hold.duplicates == every.duplicates
    data = json.loads(json.dumps(report.as_dict()))
    assert data["pairs"] == len(pairs) and len(data["scores"]) == 9
    table = format_table(report)
    assert "holdout recall" in table and "jaccard@0.8" in table
    with pytest.raises(KeyError):
        report.score("jaccard@0.7")


def test_bench_prints_the_table_then_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert dedupe_bench.main(["--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("method")
    assert any(line.startswith("jaccard@0.6") for line in out)
    last = json.loads(out[-1])
    assert [s["method"] for s in last["scores"]][::3] == last["methods"]
    assert last["methods"] == [
        f"rule@{DEFAULT_THRESHOLD:g}",
        "jaccard@0.6",
        "jaccard@0.7",
        "jaccard@0.8",
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{not json", "line 1"),
        ('{"id": 1}', "line 1"),
        ("[1, 2]", "line 1"),
        ('{"id": 1, "label": "same", "case": "x", "a": "A.", "b": "B.", "split": "tune"}', "label"),
        (
            '{"id": 1, "label": "distinct", "case": "x", "a": "", "b": "B.", "split": "tune"}',
            "empty",
        ),
        (
            '{"id": 1, "label": "distinct", "case": "x", "a": "A.", "b": "B.", "split": "tune"}\n\n'
            '{"id": 1, "label": "distinct", "case": "x", "a": "C.", "b": "D.", "split": "holdout"}',
            "line 3: id 1 repeated",
        ),
    ],
)
def test_malformed_pairs_name_the_line(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_pairs(text)


@pytest.mark.slow
def test_wheel_ships_the_labelled_set(tmp_path: Path) -> None:
    """A non-editable install contains the pairs: the built wheel holds the data file."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("selfmind-*.whl")
    with zipfile.ZipFile(wheel) as z:
        data = z.read("core/data/dedupe_pairs.jsonl").decode()
    assert len(parse_pairs(data)) == len(load_pairs())


# ---------------------------------------------------------------- the rule on single pairs
@pytest.mark.parametrize(
    ("candidate", "known", "duplicate"),
    [
        ("The user is allergic to peanuts.", "The user is not allergic to peanuts.", False),
        ("The user's daughter is 7 years old.", "The user's daughter is 8 years old.", False),
        ("The user prefers tabs over spaces.", "the user prefers tabs over spaces", True),
        (
            "The user prefers dark mode in every editor.",
            "The user prefers dark mode in every code editor.",
            True,
        ),
        ("The user lives in Paris.", "The user lives in Berlin.", False),
        ("The user works with Alice on the API.", "The user works with Bob on the API.", False),
        ("The user moved on March 3.", "The user moved on April 3.", False),
        ("The user never drinks coffee at work.", "The user drinks coffee at work.", False),
        ("  The   user prefers VIM!  ", "the user prefers vim", True),
        # substitution of a content word: a different fact
        ("The user is allergic to shellfish.", "The user is allergic to peanuts.", False),
        ("The user prefers light mode in vim.", "The user prefers dark mode in vim.", False),
        ("The user writes Rust at work.", "The user writes Go at work.", False),
        ("The user drinks coffee every morning.", "The user drinks tea every morning.", False),
        ("The user's team deploys on Mondays.", "The user's team deploys on Fridays.", False),
        ("The user lives in Munich.", "The user lives in Berlin.", False),
        # qualifier, stop words, word order, inflection: the same fact
        (
            "The user prefers dark mode in editors.",
            "The user prefers dark mode in an editor.",
            True,
        ),
        ("In vim, the user prefers dark mode.", "The user prefers dark mode in vim.", True),
        ("The user is severely allergic to peanuts.", "The user is allergic to peanuts.", True),
        # the guards
        ("The user has a dog.", "The user has a dog that fears thunder.", False),
        (
            "The user is allergic to peanuts.",
            "The user is allergic to peanuts and shellfish.",
            False,
        ),
        ("The user prefers tabs over spaces.", "The user prefers spaces over tabs.", False),
        ("The user used to live in Berlin.", "The user lives in Berlin.", False),
        ("The user's sister Anna lives in Hamburg.", "The user's sister lives in Hamburg.", False),
        ("The user works with Alice.", "The user works for Alice.", False),
        ("The user goes running before work.", "The user goes running after work.", False),
        ("The user is quite afraid of flying.", "The user is afraid of flying.", True),
    ],
)
def test_dedupe_cases(candidate: str, known: str, duplicate: bool) -> None:
    assert (Deduper().match(candidate, [mem(known)]) is not None) is duplicate
    assert (Deduper().match(known, [mem(candidate)]) is not None) is duplicate  # symmetric


def test_peanut_pair_is_above_threshold_yet_new() -> None:
    a, b = "The user is allergic to peanuts.", "The user is not allergic to peanuts."
    assert jaccard(set(words(a)), set(words(b))) == pytest.approx(6 / 7)
    assert carries_new_information(a, b)
    assert difference("The user is allergic to peanuts.", "The user is allergic to shellfish.") == (
        "substitution"
    )


def test_best_match_is_returned() -> None:
    known = [
        mem("The user prefers dark mode in every code editor and the terminal app.", 1),
        mem("The user prefers dark mode in every code editor.", 2),
        mem("The user prefers dark mode in each code editor at work.", 3),
    ]
    found = Deduper().match("The user prefers dark mode in every editor.", known)
    assert found is not None and found.id == 2


def test_threshold_is_respected() -> None:
    a, b = "The user likes green tea.", "The user likes green tea in winter mornings."
    assert Deduper(0.9).match(a, [mem(b)]) is None
    assert jaccard(set(words(a)), set(words(b))) < 0.9


def test_resolve_skips_the_memories_replaced() -> None:
    known = [mem("The user uses vim.", 1), mem("The user uses emacs.", 2)]
    assert Deduper().match("The user uses vim daily.", known) == known[0]
    assert Deduper().resolve("The user uses vim daily.", known, replacing={1}) is None
    # the same words again change nothing: the replaced memory itself is the twin
    assert Deduper().resolve("the user uses VIM", known, replacing={1}) == known[0]


@pytest.mark.parametrize(
    "text", ["", "   ", "\x00\x1b[2J", "🙂" * 300, "NOT NOT NOT", "user user", "a" * 5000]
)
def test_odd_texts_do_not_crash(text: str) -> None:
    known = [mem("The user is allergic to peanuts.", 1), mem(text or "x", 2)]
    Deduper().match(text, known)  # any answer, no exception
    assert difference(text, text) is None


def test_normalize() -> None:
    assert normalize("  Hello\tWORLD. ") == "hello world"
    assert normalize("Ｆｕｌｌ width") == "full width"


# ---------------------------------------------------------------- both backends
ISSUE_PAIRS_DISTINCT = [
    ("The user is allergic to peanuts.", "The user is allergic to shellfish."),
    ("The user prefers dark mode in vim.", "The user prefers light mode in vim."),
    ("The user writes their services in Go.", "The user writes their services in Rust."),
    ("The user drinks tea every morning.", "The user drinks coffee every morning."),
    ("The user's team deploys on Fridays.", "The user's team deploys on Mondays."),
    ("The user lives in Berlin.", "The user lives in Munich."),
    ("The user is allergic to peanuts.", "The user is not allergic to peanuts."),
    ("The user's daughter is 7 years old.", "The user's daughter is 8 years old."),
]


@pytest.mark.parametrize(("first", "second"), ISSUE_PAIRS_DISTINCT)
async def test_remember_keeps_both_distinct_facts(
    service: MemoryService, first: str, second: str
) -> None:
    one = await service.remember(user_key=ALICE, text=first)
    two = await service.remember(user_key=ALICE, text=second)
    assert (one.status, two.status) == ("added", "added")
    stored = {m.text for m in await service.store.list_memories(user_key=ALICE)}
    assert stored == {first, second}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            "The user prefers dark mode in every editor.",
            "The user prefers dark mode in every code editor.",
        ),
        ("The user runs in the evenings.", "In the evenings the user runs."),
        ("The user writes tests in pytest.", "The user writes test in pytest."),
        ("The user plays the piano.", "The user plays piano."),
    ],
)
async def test_remember_knows_the_same_fact(
    service: MemoryService, first: str, second: str
) -> None:
    one = await service.remember(user_key=ALICE, text=first)
    two = await service.remember(user_key=ALICE, text=second)
    assert one.status == "added" and (two.status, two.id) == ("duplicate", one.id)
    assert [m.text for m in await service.store.list_memories(user_key=ALICE)] == [first]


async def _add(
    store: Store, text: str, supersedes: tuple[int, ...] = ()
) -> tuple[int, str, tuple[int, ...]]:
    r = await store.add(
        user_key=ALICE,
        memory=NewMemory(text=text, source="reflection"),
        dedupe=Deduper(),
        supersedes=supersedes,
    )
    return r.id, r.status, r.superseded


async def _state(store: Store, memory_id: int) -> tuple[str, int | None]:
    m = await store.get(user_key=ALICE, memory_id=memory_id)
    assert m is not None
    return m.text, m.superseded_by


async def test_supersede_beats_dedupe(store: Store) -> None:
    dark, _, _ = await _add(store, "The user prefers dark mode in vim.")
    light, status, superseded = await _add(store, "The user prefers light mode in vim.", (dark,))
    assert (status, superseded) == ("added", (dark,))
    assert await _state(store, dark) == ("The user prefers dark mode in vim.", light)
    assert (await _state(store, light))[1] is None

    # A correction the rule alone would call a near-twin is still stored and replaces it.
    vim, _, _ = await _add(store, "The user uses vim.")
    assert (await _add(store, "The user uses vim daily."))[:2] == (vim, "duplicate")
    daily, status, superseded = await _add(store, "The user uses vim daily.", (vim,))
    assert (status, superseded) == ("added", (vim,)) and daily != vim
    assert (await _state(store, vim))[1] == daily
    active = {m.text for m in await store.list_memories(user_key=ALICE)}
    assert active == {"The user prefers light mode in vim.", "The user uses vim daily."}


async def test_supersede_by_same_words_or_by_another_twin(store: Store) -> None:
    tea, _, _ = await _add(store, "The user drinks tea.")
    # Replacing a memory by its own words: nothing changes, the old one stays active.
    assert await _add(store, "the user drinks TEA", (tea,)) == (tea, "duplicate", ())
    assert (await _state(store, tea))[1] is None
    # A duplicate of another active memory retires the named one in its favour.
    paris, _, _ = await _add(store, "The user lives in Paris.")
    berlin, _, _ = await _add(store, "The user lives in Berlin.")
    assert await _add(store, "The user currently lives in Berlin.", (paris,)) == (
        berlin,
        "duplicate",
        (paris,),
    )
    assert (await _state(store, paris))[1] == berlin
    # Ids of another user, unknown ids and repeats supersede nothing.
    other = await store.add(
        user_key="slack:T1:UBOB", memory=NewMemory(text="The user likes jazz."), dedupe=Deduper()
    )
    _, status, superseded = await _add(store, "The user likes metal.", (other.id, 999999, tea, tea))
    assert (status, superseded) == ("added", (tea,))
    bob = await store.get(user_key="slack:T1:UBOB", memory_id=other.id)
    assert bob is not None and bob.superseded_by is None


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=3) as f:
        yield f


@pytest.mark.parametrize(
    ("old_text", "new_text"),
    [
        ("The user prefers dark mode in vim.", "The user prefers light mode in vim."),
        # a near-twin that dedupe alone would drop: supersede must win
        ("The user uses vim.", "The user uses vim daily."),
    ],
)
async def test_reflection_supersede_beats_dedupe(
    fake: FakeAnthropic,
    db_url: str,
    caplog: pytest.LogCaptureFixture,
    old_text: str,
    new_text: str,
) -> None:
    caplog.set_level(logging.INFO, logger="core.memory.reflection")
    async with harness(fake, db_url) as h:
        old = await h.service.remember(user_key=ALICE, text=old_text)
        fake.enqueue(
            memories_reply(
                {
                    "text": new_text,
                    "kind": "correction",
                    "category": "tools",
                    "supersedes": [old.id],
                }
            ),
            kind="extract",
        )
        await h.say(dm(ALICE, "About vim: I changed that setting, it is easier on my eyes now."))
        assert await h.reflector.drain(10)
        active = [m.text for m in await h.store.list_memories(user_key=ALICE)]
        assert active == [new_text]
        kept = await h.store.get(user_key=ALICE, memory_id=old.id)
        assert kept is not None and kept.superseded_by is not None
    lines = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("reflection turn=")
    ]
    assert len(lines) == 1 and "added=1 duplicates=0" in lines[0] and "superseded=1" in lines[0]
