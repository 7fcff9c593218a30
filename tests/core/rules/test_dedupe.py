"""Dedupe: the rule held to the labelled set, the issue's pairs on both backends, and
supersede applied before dedupe on the reflection path."""

from __future__ import annotations

import json
import logging
import string
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench import dedupe as dedupe_bench
from core.evaluation.dedupe import (
    GROWN_FROM,
    SPLITS,
    evaluate,
    format_table,
    load_pairs,
    parse_pairs,
)
from core.memory.service import MemoryService
from core.rules.dedupe import (
    _REPHRASING,
    DEFAULT_THRESHOLD,
    NUMBER_WORDS,
    Deduper,
    _is_number,
    _rephrase,
    compare,
    jaccard,
    judge,
    rephrased,
)
from core.rules.text import fact_tokens, normalize, scanned_tokens, words
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
    holdout = report.score(rule, "holdout")
    assert holdout.false_merges == 0 and holdout.recall >= 0.95, holdout.missed_ids
    # The older held-out pairs and those written with the last rephrasings, apart.
    for part in (f"holdout<{GROWN_FROM}", f"holdout>={GROWN_FROM}"):
        score = report.score(rule, part)
        assert score.false_merges == 0 and score.recall >= 0.95, (part, score.missed_ids)
    # Issue 37: the rephrasings lift held-out recall well above the rule without them
    # (0.609 on the same pairs), with no false merge where the baseline has some.
    base = report.score(f"base@{DEFAULT_THRESHOLD:g}", "holdout")
    assert holdout.recall - base.recall >= 0.25
    assert report.score(f"base@{DEFAULT_THRESHOLD:g}", "all").false_merges > 0
    # A specific fact after the general one is mostly found; a distinct fact is (nearly)
    # never taken for one.
    assert everything.found_supersedes / everything.supersedes >= 0.9
    assert everything.false_supersedes <= 4, everything.false_supersede_ids
    assert report.score(rule, f"holdout<{GROWN_FROM}").false_supersedes <= 2
    # The pairs discriminate: plain Jaccard at the old threshold merges many distinct ones.
    assert report.score("jaccard@0.7", "all").false_merges > 50


def test_labelled_set_shape() -> None:
    pairs = load_pairs()
    assert len(pairs) >= 440
    labels = Counter(p.label for p in pairs)
    assert labels["duplicate"] >= 100 and labels["distinct"] >= 200
    assert labels["supersede"] >= 100
    # Issue 26's pairs (362 on) are spread over both splits.
    new = [p for p in pairs if p.id >= 362]
    assert len(new) >= 80 and 0.30 <= sum(p.split == "holdout" for p in new) / len(new) <= 0.36
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


def test_issue_37_pairs_cover_each_rephrasing_and_its_negatives() -> None:
    """Issue 37's 150 pairs: rephrasings of each kind and hard negatives on the same words,
    a third held out."""
    new = [p for p in load_pairs() if p.id >= 455]
    assert len(new) >= 150
    assert 0.30 <= sum(p.split == "holdout" for p in new) / len(new) <= 0.36
    labels = Counter(p.label for p in new)
    assert labels["duplicate"] >= 70 and labels["distinct"] >= 60
    for case in ("quantifier", "comparative", "verb", "synonym", "order"):
        assert ("duplicate", case) in {(p.label, p.case) for p in new}
        assert {p.split for p in new if p.case == case and p.label == "duplicate"} == {
            "tune",
            "holdout",
        }
    for case in ("quantifier", "order", "relation", "negation"):
        assert ("distinct", case) in {(p.label, p.case) for p in new}


def test_pairs_of_the_last_rephrasings_cover_each_kind_and_its_negatives() -> None:
    """Pairs 605 on: hyphens, everyday synonyms and sentence shapes, each with negatives on
    the same words, a third held out."""
    new = [p for p in load_pairs() if p.id >= GROWN_FROM]
    assert len(new) >= 70
    assert 0.30 <= sum(p.split == "holdout" for p in new) / len(new) <= 0.36
    assert all(p.split == ("holdout" if p.id % 3 == 1 else "tune") for p in new)
    labels = Counter(p.label for p in new)
    assert labels["duplicate"] >= 35 and labels["distinct"] >= 25
    for case in ("hyphen", "synonym", "order", "date"):
        assert {p.split for p in new if p.case == case and p.label == "duplicate"} == {
            "tune",
            "holdout",
        }
    for case in ("substitution", "negation", "order", "date"):
        assert ("distinct", case) in {(p.label, p.case) for p in new}


def test_report_per_split_and_json() -> None:
    pairs = load_pairs()
    report = evaluate(pairs, threshold=0.7, jaccard_thresholds=(0.6, 0.8))
    assert report.methods == ("rule@0.7", "base@0.7", "jaccard@0.6", "jaccard@0.8")
    for method in report.methods:
        tune, hold, every = (report.score(method, s) for s in ("tune", "holdout", "all"))
        assert tune.false_merges + hold.false_merges == every.false_merges
        assert tune.duplicates + hold.duplicates == every.duplicates
        old, grown = (report.score(method, f"holdout{s}{GROWN_FROM}") for s in ("<", ">="))
        assert old.duplicates + grown.duplicates == hold.duplicates
        assert old.false_merges + grown.false_merges == hold.false_merges
    data = json.loads(json.dumps(report.as_dict()))
    assert data["pairs"] == len(pairs) and len(data["scores"]) == 4 * len(SPLITS)
    table = format_table(report)
    assert "duplicate recall" in table and "jaccard@0.8" in table
    assert any(line.startswith("rule@0.7") and " holdout " in line for line in table.splitlines())
    with pytest.raises(KeyError):
        report.score("jaccard@0.7")


def test_bench_prints_the_table_then_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert dedupe_bench.main(["--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("method")
    assert any(line.startswith("jaccard@0.6") for line in out)
    last = json.loads(out[-1])
    assert [s["method"] for s in last["scores"]][:: len(SPLITS)] == last["methods"]
    assert last["methods"] == [
        f"rule@{DEFAULT_THRESHOLD:g}",
        f"base@{DEFAULT_THRESHOLD:g}",
        "jaccard@0.6",
        "jaccard@0.7",
        "jaccard@0.8",
    ]


def test_bench_scores_another_commits_rule_on_the_same_pairs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--baseline REF``: the rule of REF beside this one, in the same run (here HEAD's
    own rule, which must score as the working tree's does when the rule is committed)."""
    pairs = load_pairs()
    before = dedupe_bench.baseline_method("HEAD", pairs, DEFAULT_THRESHOLD)
    said = [before(p.a, p.b) for p in pairs]
    assert set(said) <= {"duplicate", "supersede", "distinct"} and len(set(said)) == 3
    assert dedupe_bench.main(["--json", "--baseline", "HEAD"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith(f"before@{DEFAULT_THRESHOLD:g}") for line in out)
    assert json.loads(out[-1])["methods"][1] == f"before@{DEFAULT_THRESHOLD:g}"
    with pytest.raises(KeyError):
        before("not", "a labelled pair")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{not json", "line 1"),
        ('{"id": 1}', "line 1"),
        ("[1, 2]", "line 1"),
        ('{"id": 1, "label": "same", "case": "x", "a": "A.", "b": "B.", "split": "tune"}', "label"),
        (
            '{"id": 1, "label": "distinct", "case": "x", "a": "A.", "b": "B.", "split": "x"}',
            "split",
        ),
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
    ("known", "candidate", "outcome"),
    [
        # issue 26: a specific fact after the general one supersedes it ...
        ("The user has a dog.", "The user has a dead dog.", "supersede"),
        ("The user uses vim.", "The user uses vim keybindings in VS Code.", "supersede"),
        ("The user uses Python.", "The user uses Python only for scripting.", "supersede"),
        ("The user has a car.", "The user has a broken car.", "supersede"),
        ("The user has a brother.", "The user has a younger brother.", "supersede"),
        ("The user drinks tea.", "The user drinks green tea.", "supersede"),
        ("The user drinks coffee.", "The user no longer drinks coffee.", "supersede"),
        ("The user lives in Berlin.", "The user used to live in Berlin.", "supersede"),
        ("The user's boss is Karen.", "The user's former boss is Karen.", "supersede"),
        (
            "The user is allergic to peanuts.",
            "The user is allergic to peanuts and shellfish.",
            "supersede",
        ),
        (
            "The user prefers dark mode in every editor.",
            "The user prefers dark mode in every code editor.",
            "supersede",
        ),
        # ... the general one after the specific adds nothing ...
        ("The user has a younger brother.", "The user has a brother.", "duplicate"),
        ("The user drinks green tea.", "The user drinks tea.", "duplicate"),
        ("The user uses Python only for scripting.", "The user uses Python.", "duplicate"),
        # ... unless the specific one says its state changed
        ("The user has a dead dog.", "The user has a dog.", "distinct"),
        ("The user no longer drinks coffee.", "The user drinks coffee.", "distinct"),
        ("The user's former boss is Karen.", "The user's boss is Karen.", "distinct"),
        ("The user's team ships every 3 weeks.", "The user's team ships every week.", "distinct"),
        # symbols, currencies, signs, versions and addresses are words
        ("The user's favourite food is 🍕.", "The user's favourite food is 🍣.", "distinct"),
        ("The user's rent is €900 a month.", "The user's rent is $900 a month.", "distinct"),
        ("The user's timezone is UTC+1.", "The user's timezone is UTC-1.", "distinct"),
        ("The user's email is a@example.com.", "The user's email is b@example.com.", "distinct"),
        ("The user's salary is paid in £.", "The user's salary is paid in ¥.", "distinct"),
        ("The user rates the film ★★★.", "The user rates the film ★★★★.", "distinct"),
        ("The user runs Node 18.2.", "The user runs Node 18.20.", "distinct"),
        ("The user's favourite food is 🍕.", "The user's favourite food is 🍕!", "duplicate"),
        # fillers, stop words, order, inflections, spelling: the same fact
        ("The user lives in Hamburg.", "The user really lives in Hamburg.", "duplicate"),
        ("The user's favourite editor is vim.", "The user's favorite editor is vim.", "duplicate"),
        ("The user keeps secrets in Vault.", "Secrets are kept in Vault by the user.", "duplicate"),
        ("The user prefers dark mode in vim.", "In vim, the user prefers dark mode.", "duplicate"),
        ("  The   user prefers VIM!  ", "the user prefers vim", "duplicate"),
        # different facts
        ("The user is allergic to peanuts.", "The user is not allergic to peanuts.", "distinct"),
        ("The user is allergic to peanuts.", "The user is allergic to shellfish.", "distinct"),
        ("The user's daughter is 7 years old.", "The user's daughter is 8 years old.", "distinct"),
        ("The user prefers tabs over spaces.", "The user prefers spaces over tabs.", "distinct"),
        ("The user works with Alice.", "The user works for Alice.", "distinct"),
        ("The user uses Rust at work.", "The user wants to use Rust at work.", "distinct"),
        ("The user drinks tea.", "The user drinks tea or coffee.", "distinct"),
        ("The user has a younger brother.", "The user has an older brother.", "distinct"),
        # issue 37: the same fact in other words ...
        (
            "The user prefers dark mode in every editor.",
            "The user prefers dark mode in all editors.",
            "duplicate",
        ),
        ("The user prefers tabs over spaces.", "The user prefers tabs to spaces.", "duplicate"),
        ("The user uses PostgreSQL.", "The user works with PostgreSQL.", "duplicate"),
        (
            "The user reviews every pull request.",
            "The user reviews all pull requests.",
            "duplicate",
        ),
        ("The user likes jazz.", "The user enjoys jazz.", "duplicate"),
        ("The user dislikes olives.", "The user does not like olives.", "duplicate"),
        ("The user works at Acme.", "The user works for Acme.", "duplicate"),
        ("The user is employed at Stripe.", "The user works at Stripe.", "duplicate"),
        ("The user swims on weekends.", "The user goes swimming on weekends.", "duplicate"),
        ("The user has three children.", "The user has three kids.", "duplicate"),
        ("The user's cat is named Miso.", "The user's cat is called Miso.", "duplicate"),
        ("The user is learning Spanish.", "The user is learning some Spanish.", "duplicate"),
        # the last rephrasings: a hyphenated prefix, everyday synonyms, sentence shapes ...
        ("The user reads e-mail at 9.", "The user reads email at 9.", "duplicate"),
        ("The user thanks a co-worker.", "The user thanks a colleague.", "duplicate"),
        ("The user wants terse replies.", "The user wants short answers.", "duplicate"),
        ("The user rides a bicycle.", "The user rides a bike.", "duplicate"),
        ("The user cycles home.", "The user bikes home.", "duplicate"),
        ("The user's mum is Greek.", "The user's mother is Greek.", "duplicate"),
        ("The user uses Zed as their editor.", "The user's editor is Zed.", "duplicate"),
        ("The user's shell was zsh.", "The user used zsh as their shell.", "duplicate"),
        ("The user works as a pilot.", "The user is a pilot.", "duplicate"),
        ("The user's name is Ana.", "The user is called Ana.", "duplicate"),
        ("The user swims on Sundays.", "The user swims every Sunday.", "duplicate"),
        # ... and what they must not merge
        ("The user wears shorts.", "The user wears briefs.", "distinct"),
        ("The user tracks their cycle.", "The user tracks their bike.", "distinct"),
        ("The user has an ex-wife.", "The user has a wife.", "distinct"),
        ("The user uses Zed as their editor.", "The user's editor is Vim.", "distinct"),
        ("The user works as a pilot.", "The user worked as a pilot.", "supersede"),
        ("The user is called Ana.", "The user's daughter is called Ana.", "distinct"),
        ("The user likes jazz.", "The user's wife likes jazz.", "distinct"),
        ("The user swims on Sundays.", "The user swims every Monday.", "distinct"),
        ("The user's e-mail is a@example.com.", "The user's email is b@example.com.", "distinct"),
        # ... and the hard negatives built on the same words
        ("The user works every day.", "The user works all day.", "distinct"),
        (
            "The user reviews every pull request.",
            "The user reviews some pull requests.",
            "distinct",
        ),
        (
            "The user has all their data in S3.",
            "The user has some of their data in S3.",
            "distinct",
        ),
        ("The user prefers tabs to spaces.", "The user prefers spaces to tabs.", "distinct"),
        ("The user prefers tabs over spaces.", "The user prefers spaces to tabs.", "distinct"),
        ("The user walks to the bridge.", "The user walks over the bridge.", "distinct"),
        ("The user works with Sarah.", "The user works for Sarah.", "distinct"),
        ("The user works with Google.", "The user works at Google.", "distinct"),
        ("The user likes hiking.", "The user dislikes hiking.", "distinct"),
        ("The user's manager is Priya.", "The user is Priya's manager.", "distinct"),
        ("Sarah reports to the user.", "The user reports to Sarah.", "distinct"),
        ("The user teaches Sam Spanish.", "Sam teaches the user Spanish.", "distinct"),
        ("The user likes jazz.", "The user liked jazz.", "supersede"),
        ("The user lived in Toronto.", "The user lives in Toronto.", "distinct"),
        ("The user owns a car.", "The user rents a car.", "distinct"),
    ],
)
def test_judge_cases(known: str, candidate: str, outcome: str) -> None:
    assert judge(candidate, known).outcome == outcome


def test_tokens_keep_symbols_signs_versions_and_addresses() -> None:
    assert fact_tokens("UTC+1, €5, 🍕 and a@example.com at https://x.dev/a. v2.1") == (
        "utc", "+1", "€", "5", "🍕", "and", "a@example.com", "at", "https://x.dev/a", "v2.1"
    )  # fmt: skip
    # recall's words are unchanged (the index terms stay as they are)
    assert words("UTC+1 €5 🍕") == ["utc", "1", "5"]


PLAIN_ASCII = st.lists(
    st.sampled_from([*"aeiouvcnrst DFNTU0123456789.,;:!?'\"()_*&^|", "net", "user"]), max_size=30
).map("".join)
"""Text of words, digits and punctuation, now and then a character or a sequence only the
scan makes a token of (a version's "3.11", a time's "9:30", ".net", "&")."""


@settings(max_examples=400, deadline=None)
@given(text=PLAIN_ASCII | st.text(alphabet=string.printable, max_size=40))
def test_the_plain_text_shortcut_gives_the_scans_tokens(text: str) -> None:
    assert fact_tokens.__wrapped__(text) == scanned_tokens(text)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Mail sam@example.com", ("mail", "sam@example.com")),
        ("Ping @sam", ("ping", "@sam")),
        ("Keeps /etc/hosts", ("keeps", "/etc/hosts")),
        ("Lives in UTC+1", ("lives", "in", "utc", "+1")),
        ("An e-mail", ("an", "email")),
        ("Codes in C#", ("codes", "in", "csharp")),
        ("Runs 3.11", ("runs", "3.11")),
        ("At 9:30", ("at", "9:30")),
        ("Runs .NET daily", ("runs", "dotnet", "daily")),
        ("Pays $5", ("pays", "$", "5")),
        ("50% off", ("50", "%", "off")),
        ("a <3 b > c = d", ("a", "<", "3", "b", ">", "c", "=", "d")),
        ("The user's dog, Rex (a beagle)!", ("the", "user", "s", "dog", "rex", "a", "beagle")),
    ],
)
def test_the_plain_text_shortcut_leaves_to_the_scan_what_only_it_finds(
    text: str, tokens: tuple[str, ...]
) -> None:
    assert fact_tokens(text) == tokens == scanned_tokens(text)


REPHRASE_WORDS = """use uses used work works worked working as their vim editor editors name
is was called on fridays weekends cycle cycles to home employed at by dislike dislikes disliked
go goes going swimming every each all some of the user s day prefer prefers preferred rather
than tabs spaces with for film mom enjoys""".split()
"""Every word a rule of :func:`rephrased` looks for, and a few around them."""


@settings(max_examples=400, deadline=None)
@given(toks=st.lists(st.sampled_from(REPHRASE_WORDS), max_size=12))
@example(toks="the user uses vim as their editor".split())
@example(toks="the user works as a nurse".split())
@example(toks="the user s name is sam".split())
@example(toks="the user swims on fridays".split())
@example(toks="the user cycles to work".split())
@example(toks="the user works with go".split())
@example(toks="the user is employed at acme".split())
@example(toks="the user dislikes jazz".split())
@example(toks="the user goes swimming".split())
@example(toks="the user formats all editors".split())
@example(toks="the user tidies each room".split())
@example(toks="the user learns some spanish".split())
@example(toks="the user prefers tabs to spaces".split())
@example(toks="the user prefers tea rather than coffee".split())
def test_word_for_word_rephrasing_is_the_whole_rule_without_its_words(toks: list[str]) -> None:
    # Without a word of _REPHRASING the shortcut is taken; with one, the whole rule runs.
    assert _rephrase(tuple(toks)) == rephrased(tuple(toks))
    plain = tuple(w for w in toks if w not in _REPHRASING)
    assert _rephrase(plain) == rephrased(plain)


def test_peanut_pair_is_above_threshold_yet_new() -> None:
    a, b = "The user is allergic to peanuts.", "The user is allergic to shellfish."
    assert jaccard(set(words(a)), set(words(b))) == pytest.approx(5 / 7)
    assert compare(b, a).reason == "substitution"
    assert compare("The user is not allergic to peanuts.", a).reason == "negation"


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
    assert Deduper(0.9).judge(b, a).outcome == "distinct"
    assert Deduper().judge(b, a).outcome == "supersede"


def test_decide_skips_the_memories_replaced() -> None:
    known = [mem("The user uses vim daily.", 1), mem("The user uses emacs.", 2)]
    assert Deduper().decide("The user uses vim.", known).duplicate_of == known[0]
    assert Deduper().decide("The user uses vim.", known, replacing={1}).duplicate_of is None
    # the same words again change nothing: the replaced memory itself is the twin
    assert (
        Deduper().decide("the user uses VIM daily", known, replacing={1}).duplicate_of == known[0]
    )
    # a more specific one is not a duplicate: it names what it supersedes
    more = Deduper().decide("The user uses vim daily at work.", known)
    assert more.duplicate_of is None and more.supersedes == (known[0],)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "\x00\x1b[2J", "🙂" * 300, "NOT NOT NOT", "user user", "a" * 5000, "@@ // ~/"],
)
def test_odd_texts_do_not_crash(text: str) -> None:
    known = [mem("The user is allergic to peanuts.", 1), mem(text or "x", 2)]
    Deduper().decide(text, known)  # any answer, no exception
    assert compare(text, text).outcome == "duplicate"


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
            "The user prefers dark mode in every code editor.",
            "The user prefers dark mode in every editor.",
        ),
        ("The user runs in the evenings.", "In the evenings the user runs."),
        ("The user's timezone is UTC+1.", "the user's timezone is utc+1"),
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


@pytest.fixture
def product(store: Store) -> MemoryService:
    """The service at the product's dedupe threshold (the shared fixture uses 0.7)."""
    return MemoryService(store, dedupe_threshold=DEFAULT_THRESHOLD)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            "The user prefers dark mode in every editor.",
            "The user prefers dark mode in all editors.",
        ),
        ("The user prefers tabs over spaces.", "I prefer tabs to spaces"),
        ("The user uses PostgreSQL for analytics.", "I work with PostgreSQL for analytics"),
        # the last rephrasings (a hyphen, synonyms, "uses X as their Y")
        ("The user reads e-mail only in the morning.", "I read email only in the morning"),
        ("The user prefers concise answers.", "I prefer short answers"),
        ("The user cycles to work.", "I bike to work"),
        ("The user uses Vim as their editor.", "my editor is Vim"),
    ],
)
async def test_remember_merges_issue_37_rephrasings(
    product: MemoryService, first: str, second: str
) -> None:
    """Issue 37: these were stored twice (``/remember``'s text goes through the offline
    third-person rule first)."""
    one = await product.remember(user_key=ALICE, text=first)
    two = await product.remember(user_key=ALICE, text=second)
    assert one.status == "added" and (two.status, two.id) == ("duplicate", one.id)
    assert [m.text for m in await product.store.list_memories(user_key=ALICE)] == [first]


ISSUE_26_PAIRS = [
    ("The user has a dog.", "The user has a dead dog."),
    ("The user uses vim.", "The user uses vim keybindings in VS Code."),
    ("The user uses Python.", "The user uses Python only for scripting."),
    ("The user has a car.", "The user has a broken car."),
    ("The user has a brother.", "The user has a younger brother."),
    ("The user drinks tea.", "The user drinks green tea."),
]


@pytest.mark.parametrize(("general", "specific"), ISSUE_26_PAIRS)
async def test_remember_a_specific_fact_supersedes_the_general_one(
    product: MemoryService, general: str, specific: str
) -> None:
    """Issue 26: these were answered "I already knew that" and dropped."""
    one = await product.remember(user_key=ALICE, text=general)
    two = await product.remember(user_key=ALICE, text=specific)
    assert (two.status, two.superseded) == ("added", (one.id,))
    assert [m.text for m in await product.store.list_memories(user_key=ALICE)] == [specific]
    old = await product.store.get(user_key=ALICE, memory_id=one.id)
    assert old is not None and (old.text, old.superseded_by) == (general, two.id)
    events = [(e.memory_id, e.event, e.related_id) for e in await product.history(user_key=ALICE)]
    assert events == [
        (one.id, "added", None),
        (two.id, "added", None),
        (one.id, "superseded", two.id),
    ]
    # the general fact again adds nothing to the specific one, unless that one is a state
    # the general one is no longer (a dog again after a dead dog is a new dog)
    three = await product.remember(user_key=ALICE, text=general)
    state = "dead" in specific or "broken" in specific
    assert (three.status, three.id == two.id) == (
        ("added", False) if state else ("duplicate", True)
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("The user's favourite food is 🍕.", "The user's favourite food is 🍣."),
        ("The user's rent is €900 a month.", "The user's rent is $900 a month."),
        ("The user's timezone is UTC+1.", "The user's timezone is UTC-1."),
        ("The user's email is a@example.com.", "The user's email is b@example.com."),
        ("The user has a dead dog.", "The user has a dog."),
    ],
)
async def test_remember_keeps_facts_that_differ_in_a_symbol_or_a_state(
    product: MemoryService, first: str, second: str
) -> None:
    one = await product.remember(user_key=ALICE, text=first)
    two = await product.remember(user_key=ALICE, text=second)
    assert (one.status, two.status, two.superseded) == ("added", "added", ())
    stored = {m.text for m in await product.store.list_memories(user_key=ALICE)}
    assert stored == {first, second}


async def test_import_supersedes_the_general_memories(product: MemoryService) -> None:
    stored = await product.remember(user_key=ALICE, text="The user has a brother.")
    lines = [
        json.dumps({"text": t})
        for t in (
            "The user drinks tea.",
            "The user has a younger brother.",  # supersedes the stored memory
            "The user drinks green tea.",  # supersedes the line before
            "The user drinks tea.",  # adds nothing
            "The user has a brother.",  # adds nothing
        )
    ]
    result = await product.import_lines(user_key=ALICE, lines=lines)
    assert (result.added, result.duplicates, result.superseded) == (3, 2, 2)
    active = {m.text for m in await product.store.list_memories(user_key=ALICE)}
    assert active == {"The user has a younger brother.", "The user drinks green tea."}
    old = await product.store.get(user_key=ALICE, memory_id=stored.id)
    assert old is not None and old.superseded_by is not None


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

    # A correction the rule alone would call a duplicate is still stored and replaces it.
    daily, _, _ = await _add(store, "The user uses vim daily.")
    assert (await _add(store, "The user uses vim."))[:2] == (daily, "duplicate")
    vim, status, superseded = await _add(store, "The user uses vim.", (daily,))
    assert (status, superseded) == ("added", (daily,)) and daily != vim
    assert (await _state(store, daily))[1] == vim
    active = {m.text for m in await store.list_memories(user_key=ALICE)}
    assert active == {"The user prefers light mode in vim.", "The user uses vim."}


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
        # a general one that dedupe alone would drop: supersede must win
        ("The user uses vim daily.", "The user uses vim."),
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


async def test_reflection_supersedes_a_general_memory_by_the_rule(
    fake: FakeAnthropic, db_url: str
) -> None:
    """The model names no supersede: the rule finds that the new memory narrows the old."""
    async with harness(fake, db_url) as h:
        old = await h.service.remember(user_key=ALICE, text="The user has a brother.")
        fake.enqueue(
            memories_reply(
                {
                    "text": "The user has a younger brother.",
                    "kind": "fact",
                    "category": "general",
                    "supersedes": [],
                }
            ),
            kind="extract",
        )
        await h.say(dm(ALICE, "My younger brother visits next week."))
        assert await h.reflector.drain(10)
        active = [m.text for m in await h.store.list_memories(user_key=ALICE)]
        assert active == ["The user has a younger brother."]
        kept = await h.store.get(user_key=ALICE, memory_id=old.id)
        assert kept is not None and kept.superseded_by is not None


def test_remember_reply_names_what_a_specific_fact_replaces() -> None:
    from core.memory.replies import remembered
    from core.types import AddResult

    text = "The user has a younger brother."
    assert remembered(AddResult(5, "added", (3,), text)) == (
        f"Remembered (`#5`): {text} It replaces `#3`."
    )
    assert remembered(AddResult(5, "added", (), text), code=str) == f"Remembered (#5): {text}"
    assert remembered(AddResult(3, "duplicate")) == "I already knew that (`#3`)."


def test_redundant_keeps_the_newest_twin_and_the_specific_fact() -> None:
    from core.rules.dedupe_index import redundant

    texts = [
        "The user prefers tabs over spaces.",  # 0: older twin of 2
        "The user has a younger brother.",  # 1: the specific fact stays
        "The user prefers tabs to spaces.",  # 2: the newer twin stands for both
        "The user has a brother.",  # 3: general, newer, still out for 1
        "The user likes jazz.",  # 4, 5, 6: three twins, the newest stays
        "The user enjoys jazz.",
        "The user enjoys jazz!",
        "The user works every day.",  # 7, 8: not twins
        "The user works all day.",
        "",
    ]
    assert redundant(texts, Deduper()) == {0, 3, 4, 5}
    assert redundant([], Deduper()) == set()


def test_one_parse_serves_the_screen_the_filter_and_the_rule() -> None:
    """``redundant`` (the profile) filters by information words, an import's index screens
    by stems and both then judge: each text is parsed once for all of them."""
    from core.rules import dedupe
    from core.rules.dedupe_index import DedupeIndex, Known, redundant

    texts = ["The user has a younger brother.", "The user has a brother."]
    dedupe._parse.cache_clear()
    assert redundant(texts, Deduper()) == {1}
    index = DedupeIndex(Deduper(), texts)
    index.add(Known(1, texts[0]))
    assert index.decide(texts[1]).duplicate_of == Known(1, texts[0])
    assert dedupe.info_words(texts[0]) <= dedupe.screen_tokens(texts[0])
    assert dedupe._parse.cache_info().misses == len(texts)


@pytest.mark.parametrize(
    "token",
    [
        "three",
        "dozen",
        "v2",
        "2024",
        "３",
        "٣",
        "²",
        "½",
        "ⅻ",
        "x²",
        "abc",
        "étage",
        "日本",
        "",
        "3.11",
    ],
)
def test_a_number_token_is_a_number_word_or_holds_a_digit(token: str) -> None:
    # _is_number skips the scan for tokens of letters only: the same answer as the scan.
    assert _is_number(token) == (token in NUMBER_WORDS or any(ch.isdigit() for ch in token))
