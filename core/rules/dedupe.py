"""Dedupe: what a candidate memory adds to the known ones.

A candidate is judged against each known memory (:func:`judge`) as

- **duplicate**: it says nothing the known memory does not (equal after
  :func:`core.rules.text.normalize`; or the same facts in other words, stop words, order or
  inflections; or a *general* fact after its specific twin: "The user has a brother." after
  "The user has a younger brother.");
- **supersede**: a more specific fact about the same thing, or a new state of it ("The user
  has a younger brother." after "The user has a brother.", "The user has a dead dog." after
  "The user has a dog."): it is stored and the known memory is superseded by it (history
  keeps both, :mod:`core.store`);
- **distinct**: a different fact; both stay.

Order decides: the same two sentences are a supersede one way and a duplicate the other.

How. The two texts become dedupe tokens (:func:`core.rules.text.fact_tokens`: words plus
symbols, currencies, signs, versions, URLs and addresses, so 🍕/🍣, €/$, UTC+1/UTC-1 and
a@/b@example.com differ), rephrasings are made one form (:func:`_rephrase`, issue 37: "every
editor" / "all editors", "tabs to spaces" / "tabs over spaces" after "prefer", "works with" /
"uses", "works for" / "works at", "enjoys" / "likes", "dislikes" / "does not like", "goes
swimming" / "swims", "kids" / "children", everyday synonyms such as "concise" / "short"
answers and "bikes" / "cycles", from a table of a few words, :data:`REPHRASINGS`; sentence
shapes: "uses Vim as their editor" / "the user's editor is Vim", "works as a" / "is a",
"'s name is" / "is called", "on Fridays" / "every Friday", :func:`_restructure`; "e-mail" is
"email" in the tokens already) and then stems. The **screen** first: the Jaccard similarity
``|A ∩ B| / |A ∪ B|`` of the two stem sets must reach ``threshold`` (setting
``dedupe_threshold``, default :data:`DEFAULT_THRESHOLD`), or the pair is distinct. Then what
differs decides. A word present on one side only is **information** unless it is a function
word (articles, pronouns, auxiliaries: :data:`FUNCTION_WORDS`) or a known filler
(:data:`FILLERS`: "really", "currently", "also", ...). Scope and degree words ("only",
"all", "very", "mildly") are information, not stop words, here.

- one text saying of the user what the other says of something of the user's ("The user is
  called Sam." / "The user's son is called Sam."): distinct;
- the user and another word trading places before the same word ("The user teaches Sam."
  / "Sam teaches the user.", "The user's manager is Priya." / "The user is Priya's
  manager."; not judged in a passive sentence): distinct;
- a regular past tense right after "the user" ("liked", "lived") is a past tense, like
  "was" and the irregular ones;
- a negation on one side only ("not", "never", "no", "without"; "doesn't" counts as "does
  not"), a hedge or plan ("might", "wants to", :data:`HEDGES`), or an "or" ("tea or
  coffee"): distinct;
- a preposition or relation swapped for another ("works with" / "works for", "in" /
  "near", "before" / "after"): distinct;
- information on both sides (peanuts / shellfish, 7 / 8, 🍕 / 🍣, younger / older): a
  substitution, distinct; so is the same words in the opposite direction ("tabs over
  spaces" / "spaces over tabs");
- information on the candidate's side only: **supersede** (more specific, or a change of
  state: :data:`STATE_WORDS` "dead", "broken", "former", "no longer", "used to", a past
  tense);
- information on the known memory's side only: the candidate is the general fact and adds
  nothing (**duplicate**), unless what the known memory has there changes the general fact
  (a state word or a number: "The user has a dog." after "The user has a dead dog.", "every
  week" after "every 2 weeks"), then distinct;
- nothing but function words, fillers, order and inflections differ: duplicate.

Erring on the side of "distinct" costs one near-twin row that a cleanup can merge later; a
false merge loses what the user said and tells them "I already knew that". Synonyms beyond
the short table (:data:`REPHRASINGS`: words that mean the same in any third-person fact)
stay apart for that reason: "loves" is not "likes", "owns" is not "has" (see the table).

Measured on the labelled pairs shipped in ``core/data/dedupe_pairs.jsonl`` by
:mod:`core.evaluation.dedupe` (``selfmind eval dedupe``, ``python bench/dedupe.py``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Generic, Literal, Protocol, TypeVar

from core.rules.text import STOP_WORDS, fact_tokens, normalize, stem


class HasText(Protocol):
    """What dedupe compares: a memory's text."""

    @property
    def text(self) -> str: ...


class HasIdText(Protocol):
    """A memory as dedupe sees it: its id (None for one not stored yet) and text."""

    @property
    def id(self) -> int | None: ...

    @property
    def text(self) -> str: ...


M = TypeVar("M", bound=HasText)
R = TypeVar("R", bound=HasIdText)

Outcome = Literal["duplicate", "supersede", "distinct"]
Reason = Literal[
    "same",  # duplicate: nothing but form differs
    "general",  # duplicate: the candidate is the general fact of a specific known one
    "specific",  # supersede: the candidate narrows the known fact
    "state",  # supersede: a new state of the same thing; distinct: the general after it
    "screen",  # distinct: too little in common
    "negation",
    "modality",
    "coordination",
    "preposition",
    "number",
    "substitution",
    "order",
]

NEGATIONS = frozenset(
    """not no never none nobody nothing neither nor cannot cant dont doesnt didnt isnt wasnt
    arent werent wont wouldnt shouldnt couldnt hasnt havent hadnt without non n t""".split()
)
NUMBER_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty
    ninety hundred thousand million billion first second third fourth fifth sixth seventh
    eighth ninth tenth once twice half dozen single double""".split()
)
STATE_WORDS = frozenset(
    """dead died deceased late former formerly ex previous previously broken broke stolen
    lost sold retired cancelled canceled ended expired cracked damaged quit quitting stop
    stopped stops start started starts began anymore almost nearly fake other""".split()
)
"""Words that change the state of the thing a fact is about (or, "other", its frequency:
"every other Friday"). On the candidate's side only: a new state, it supersedes; on the
known memory's side only: the general candidate is a different fact (the dog is dead)."""
HEDGES = frozenset(
    """might maybe perhaps possibly probably plan plans planning planned want wants wanted
    wish wishes hope hopes hoping consider considers considering try tries tried trying
    attempt attempts should could would someday eventually intend intends""".split()
)
"""One-sided, these make a plan, a wish or a guess of a fact: never the same fact."""
PREPOSITIONS = frozenset(
    """about at by for from in into of on onto to toward towards upon with within via per
    among between through near inside outside behind beyond beneath above below over under
    before after off out up down against during until since""".split()
)
"""Swapped for one another, these change the relation ("works with" / "works for")."""
ALTERNATIVES = frozenset("or either".split())
"""One-sided, an alternative weakens a fact: "tea or coffee" is not "tea"."""
FILLERS = frozenset(
    """actually really truly just also too indeed definitely certainly surely simply
    basically essentially literally honestly currently presently now still got sadly
    unfortunately luckily happily obviously clearly personally""".split()
)
"""Known fillers: words that add nothing to a fact ("The user really lives in Hamburg.")."""
_INFO_STOP = frozenset(
    """only all every each most more less few very so own same other such both once again
    further no nor not off out up down over under above below before after against during
    until than""".split()
)
FUNCTION_WORDS = (STOP_WORDS - _INFO_STOP - frozenset("some most many several few".split())) | (
    frozenset("is am are be been being".split())
)
"""Words that carry no fact on their own: the recall stop words less scope, degree,
negation and relation words (which are information here)."""
_PAST = frozenset("was were".split())
# Before a participle these make it passive or perfect ("are kept"), not a past tense.
_AUXILIARIES = frozenset("is are am be been being was were has have had get gets got".split())
# Words whose neighbours have a direction: "tabs over spaces", "from Berlin to Munich".
_DIRECTED_NEXT = frozenset("from to into over than instead rather versus vs".split())
_DIRECTED_PREV = frozenset("over than instead rather versus vs".split())
_DIRECTED = _DIRECTED_NEXT | _DIRECTED_PREV

# The screen's default: the highest threshold reaching the best duplicate recall with no
# false merge on the tune split of the labelled pairs (bench/dedupe.py; 0.7 before issue 14).
DEFAULT_THRESHOLD = 0.5

# Cardinal number words as digits, so "7 years" and "seven years" state the same number.
_CARDINALS = (
    {
        w: str(i)
        for i, w in enumerate(
            "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
            " fifteen sixteen seventeen eighteen nineteen twenty".split()
        )
    }
    | {"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70"}
    | {"eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000", "dozen": "12"}
)
# Contracted negations ("doesn't" -> "doesn" "t") count as "not", so "doesn't eat" and
# "does not eat" carry the same negation.
_NOT = frozenset("not t n nt cannot cant dont doesnt didnt isnt wasnt arent werent wont".split())
_NOT |= frozenset("wouldnt shouldnt couldnt hasnt havent hadnt".split())


def _is_number(token: str) -> bool:
    # A letter is never a digit (Unicode L* against Nd/No): most tokens need no scan.
    return token in NUMBER_WORDS or (not token.isalpha() and any(ch.isdigit() for ch in token))


@dataclass(frozen=True, slots=True)
class _Words:
    """What the screen and the information words need of a text (:func:`_words`), the
    first half of :class:`_Parsed`."""

    norm: str  # :func:`core.rules.text.normalize`: equal forms are the same memory
    raw: tuple[str, ...]  # :func:`fact_tokens`
    words: tuple[str, ...]  # rephrased (:func:`_rephrase`) unless parsed without
    stems: tuple[str, ...]  # each word's stem (:func:`_token_stem`)
    stem_set: frozenset[str]  # the screen's tokens
    info: frozenset[str]  # stems that carry information (numbers as digits, markers)
    dropped: frozenset[int]  # positions of negation words that belong to a state marker


@dataclass(frozen=True, slots=True)
class _Parsed:
    norm: str
    words: tuple[str, ...]
    stem_set: frozenset[str]  # the screen's tokens
    info: frozenset[str]  # stems that carry information (numbers as digits, markers)
    numbers: tuple[str, ...]  # number tokens in order (cardinals as digits), repeats kept
    negations: tuple[str, ...]  # negation words, sorted, contractions as "not"
    relations: frozenset[str]  # prepositions present
    seq: tuple[str, ...]  # info stems and "@"-marked directed words, in order
    roles: frozenset[tuple[str, str, str]] = frozenset()  # (who, "does"|"of", what)
    owned: tuple[str, str] | None = None  # whose fact, and its next word (:func:`_owned`)


# Irregular verb forms as their verb, so "kept" and "keeps", "written" and "writes" meet;
# the simple past forms also mark a past tense (a change of state, like "was").
_IRREGULAR = {
    form: verb
    for verb, forms in {
        "go": "went gone",
        "make": "made",
        "take": "took taken",
        "keep": "kept",
        "write": "wrote written",
        "run": "ran",
        "give": "gave given",
        "come": "came",
        "see": "saw seen",
        "know": "knew known",
        "think": "thought",
        "buy": "bought",
        "bring": "brought",
        "teach": "taught",
        "build": "built",
        "send": "sent",
        "spend": "spent",
        "feel": "felt",
        "find": "found",
        "tell": "told",
        "speak": "spoke spoken",
        "drive": "drove driven",
        "ride": "rode ridden",
        "eat": "ate eaten",
        "drink": "drank drunk",
        "grow": "grew grown",
        "fly": "flew flown",
        "sleep": "slept",
        "meet": "met",
        "pay": "paid",
        "hold": "held",
        "swim": "swam swum",
        "sing": "sang sung",
        "choose": "chose chosen",
        "wear": "wore worn",
    }.items()
    for form in forms.split()
}
_SIMPLE_PAST = frozenset(
    """went made took kept wrote ran gave came saw knew thought bought brought taught built
    sent spent felt found told spoke drove rode ate drank grew flew slept met paid held swam
    sang chose wore had did""".split()
)
# British spellings as American ones (favourite/favorite, organise/organize, analyse/analyze,
# travelled/traveled): the same word.
_SPELLING = (
    (re.compile(r"(?<=\w{3})our(?=$|s$|ed$|ing$|ite|able|er)"), "or"),
    (re.compile(r"(?<=\w{3})is(?=e$|es$|ed$|ing$|ation)"), "iz"),
    (re.compile(r"(?<=\w{2})ys(?=e$|es$|ed$|ing$)"), "yz"),
    (re.compile(r"(?<=[aeiou])ll(?=ed$|ing$|er$)"), "l"),
)


@lru_cache(maxsize=65536)
def _token_stem(token: str) -> str:
    """Dedupe's stem of one token: irregular verb forms as their verb, British spellings as
    American, then the Snowball stem; non-word tokens (symbols, addresses) as they are.
    Cached: a text's tokens are mostly ones seen before, and the spelling patterns cost
    more than the look-up (a memory recalled for the first time is parsed for the twins
    check of every prompt, :func:`core.memory.profile.build_context`)."""
    if not token.isalnum():
        return token
    token = _IRREGULAR.get(token, token)
    if token.isascii() and len(token) > 5:
        for pattern, repl in _SPELLING:
            token = pattern.sub(repl, token)
    return stem(token)


REPHRASINGS: dict[str, str] = {
    # Same verb, other word: "enjoys jazz" says what "likes jazz" says; "resides in" is
    # "lives in"; "named" and "called" both name a thing. Degree words stay apart ("loves"
    # is not "likes"). Not "owns" as "has": "has" is a function word, so "rents a car"
    # after "owns a car" would read as more specific (a false supersede).
    **dict.fromkeys(("enjoy", "enjoys"), "likes"),
    "enjoyed": "liked",
    "enjoying": "liking",
    **dict.fromkeys(("reside", "resides"), "lives"),
    "resided": "lived",
    "residing": "living",
    "named": "called",
    # Everyday synonyms (issue 37): words that name the same thing in any fact about a
    # person. The length of an answer: "concise", "brief", "succinct", "terse" answers are
    # short ones (as adjectives only: "shorts" and "briefs" stay clothes; "detailed" is not
    # "long"). The bicycle ("cycles" only as a verb of going, :func:`_restructure`; a "sleep
    # cycle" stays), films, holidays, parents, colleagues, size, buying, television.
    **dict.fromkeys(("concise", "brief", "succinct", "terse"), "short"),
    **dict.fromkeys(("concisely", "succinctly", "tersely"), "briefly"),
    "lengthy": "long",
    **dict.fromkeys(("response", "reply"), "answer"),
    **dict.fromkeys(("responses", "replies"), "answers"),
    "replied": "answered",
    "bicycle": "bike",
    "bicycles": "bikes",
    "cycling": "biking",
    "cycled": "biked",
    "film": "movie",
    "films": "movies",
    "vacation": "holiday",
    "vacations": "holidays",
    **dict.fromkeys(("mom", "mum", "mommy", "mummy", "mama"), "mother"),
    **dict.fromkeys(("moms", "mums"), "mothers"),
    **dict.fromkeys(("dad", "daddy", "papa"), "father"),
    "dads": "fathers",
    "coworker": "colleague",
    "coworkers": "colleagues",
    "large": "big",
    "larger": "bigger",
    "largest": "biggest",
    "purchase": "buy",
    "purchases": "buys",
    "purchased": "bought",
    "purchasing": "buying",
    "television": "tv",
    "physician": "doctor",
    # Plural forms the stemmer does not fold, and their everyday synonym ("kids").
    "children": "child",
    "kids": "child",
    "kid": "child",
    "people": "person",
    "men": "man",
    "women": "woman",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
}
"""Word for word rephrasings (:func:`_rephrase`): a word on the left says nothing its
right-hand word does not, in every sentence a memory is written as (a third-person fact
about the user). Kept small on purpose: a synonym that is only sometimes one ("loves",
"adores", "uses" for "likes") would merge distinct facts; the everyday synonyms were chosen
for the kinds of rephrasing the labelled pairs miss, each with negatives on the same words
(pairs 605 on)."""
_WORK = {"work": "use", "works": "uses", "worked": "used", "working": "using"}
_PREFER = frozenset("prefer prefers preferred preferring".split())
_QUANTIFIERS = frozenset("some most many several few".split())
"""Quantifiers that are information (not stop words): "some pull requests" is not "every
pull request"."""
_EVERY = frozenset("every each".split())
_GO = frozenset("go goes going".split())
_AUX_BE = frozenset("is are am was were be been being".split())
_SKIP_ALL = frozenset("of the my their his her our your its these those".split())


_AS_DETERMINERS = frozenset("their the a an his her my our its".split())
_USES = {"uses": "is", "use": "are", "used": "was"}
_WORKS_AS = {"works": "is", "work": "are", "worked": "was"}
_WEEKDAY_PLURALS = {
    f"{day}s": day
    for day in "monday tuesday wednesday thursday friday saturday sunday weekend".split()
}
_NOT_A_JOB = (STOP_WORDS | PREPOSITIONS) - frozenset("a an".split())
_CYCLE_VERB = {"cycle": "bike", "cycles": "bikes"}
_GOING_TO = frozenset("to into home around through across along everywhere daily".split())


def _restructure(toks: tuple[str, ...]) -> tuple[str, ...]:
    """``toks`` with the sentence shapes that state one fact two ways made one shape:

    - "uses X as their Y" as "'s Y is X" ("The user uses Vim as their editor." is "The
      user's editor is Vim."; "used ... as" as "was"); X is one to four words, none of them
      a function word or a preposition, Y one to three words up to the end or a preposition;
    - "works as a Y" as "is a Y" ("worked as" as "was"; the article may be missing): a job;
    - "'s name is X" as "is called X" ("The user's name is Sam." is "The user is called
      Sam.");
    - "on Fridays" (a weekday or "weekends" in the plural) as "every Friday": a habit;
    - "cycles" before a word of going ("to", "home", "around", ...) as "bikes" (the verb;
      "a sleep cycle" stays).
    """
    out: list[str] = []
    n = len(toks)
    i = 0
    while i < n:
        w = toks[i]
        nxt = toks[i + 1] if i + 1 < n else ""
        if w in _USES and (shape := _uses_as(toks, i)) is not None:
            x, y, end = shape
            out += ["s", *y, _USES[w], *x]
            i = end
            continue
        if w in _WORKS_AS and nxt == "as" and i + 2 < n and toks[i + 2] not in _NOT_A_JOB:
            out.append(_WORKS_AS[w])
            i += 2
            continue
        if w == "s" and nxt == "name" and i + 2 < n and toks[i + 2] in ("is", "was"):
            out += [toks[i + 2], "called"]
            i += 3
            continue
        if w == "on" and nxt in _WEEKDAY_PLURALS:
            out += ["every", _WEEKDAY_PLURALS[nxt]]
            i += 2
            continue
        if w in _CYCLE_VERB and nxt in _GOING_TO:
            out.append(_CYCLE_VERB[w])
        else:
            out.append(w)
        i += 1
    return tuple(out)


def _uses_as(toks: tuple[str, ...], at: int) -> tuple[list[str], list[str], int] | None:
    """For "uses X as their Y" at ``at``: X, Y and the index after Y; else None."""
    try:
        as_at = toks.index("as", at + 2, at + 6)
    except ValueError:
        return None
    x = list(toks[at + 1 : as_at])
    if any(t in FUNCTION_WORDS or t in PREPOSITIONS for t in x):
        return None
    if as_at + 1 >= len(toks) or toks[as_at + 1] not in _AS_DETERMINERS:
        return None
    y: list[str] = []
    end = as_at + 2
    while end < len(toks) and len(y) < 3:
        t = toks[end]
        if t in FUNCTION_WORDS or t in PREPOSITIONS or t in STOP_WORDS:
            break
        y.append(t)
        end += 1
    return (x, y, end) if y else None


_SHAPING = (
    frozenset(_USES) | frozenset(_WORKS_AS) | frozenset(_WEEKDAY_PLURALS) | frozenset(_CYCLE_VERB)
) | {"name"}
"""Words one of :func:`_restructure`'s shapes starts or needs (its "name", "on Fridays"'s
plural): without them it changes nothing."""
_REPHRASING = (
    _SHAPING
    | frozenset(_WORK)
    | _PREFER
    | _GO
    | _EVERY
    | frozenset("employed dislike dislikes disliked all some".split())
)
"""The words :func:`_rephrase` does more with than look up in :data:`REPHRASINGS` (a "to"
or "rather" only after a :data:`_PREFER` word)."""


def _rephrase(toks: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`rephrased`: word for word (:data:`REPHRASINGS`) when ``toks`` hold none of
    :data:`_REPHRASING` (77 % of bench/use.py's 10,000 memories of one user: 3.8 against
    8.2 us a text)."""
    if _REPHRASING.isdisjoint(toks):
        return tuple([REPHRASINGS.get(w, w) for w in toks])
    return rephrased(toks)


def rephrased(toks: tuple[str, ...]) -> tuple[str, ...]:
    """``toks`` with the rephrasings that say the same fact in other words made one form.

    - :data:`REPHRASINGS`, word for word; "dislikes" as "does not like" (a negation);
    - "works with X" as "uses X" ("works for X" stays its own relation), and "works for X"
      as "works at X" (the employer either way; "works with" / "for" / "on" / "under" stay
      distinct), "is employed at/by" as "works at/for";
    - "every" / "each" / "all" before a plural ("every editor", "all editors", "all of the
      user's editors") as one quantifier; "all" before a singular ("all day") is not
      "every day" and stays "all"; "some" before a plural is a quantifier ("some pull
      requests" is not "every pull request", nor "some of" "all"), before a mass noun an
      article ("learning some Spanish");
    - after "prefer", a comparison's "to" or "rather than" as "over" ("tabs to spaces" is
      "tabs over spaces"; "prefers to use" is an infinitive and stays);
    - "goes swimming" as "swims" (a verb of going before an -ing activity adds nothing;
      "went" keeps its past tense).
    """
    toks = _restructure(toks)
    out: list[str] = []
    preferred = -1  # index in ``out`` of the last "prefer" form
    n = len(toks)
    i = 0
    while i < n:
        w = toks[i]
        nxt = toks[i + 1] if i + 1 < n else ""
        if w in _WORK and nxt == "with":
            out.append(_WORK[w])
            i += 2
            continue
        if w in _WORK and nxt == "for":
            out += [w, "at"]
            i += 2
            continue
        if w == "employed" and out and out[-1] in _AUX_BE and nxt in ("at", "by"):
            out += ["works", "at"]  # the aux stays: "was employed" keeps its past tense
            i += 2
            continue
        if w in ("dislike", "dislikes", "disliked"):
            out += ["not", {"dislike": "like", "dislikes": "likes"}.get(w, "liked")]
            i += 1
            continue
        if w in _GO and nxt.endswith("ing") and len(nxt) > 5:
            i += 1  # "goes swimming" -> "swimming" (stems as "swim")
            continue
        if w in _EVERY or (w == "all" and _plural_follows(toks, i + 1)):
            out.append("every")
        elif w == "some" and nxt != "of" and not _plural_follows(toks, i + 1):
            out.append("a")  # "learning some Spanish": not a count
        elif w == "to" and preferred >= 0 and len(out) - preferred > 1:
            out.append("over")
        elif w == "rather" and nxt == "than" and preferred >= 0:
            out.append("over")
            i += 1
        else:
            out.append(REPHRASINGS.get(w, w))
        if w in _PREFER:
            preferred = len(out) - 1
        i += 1
    return tuple(out)


def _plural_follows(toks: tuple[str, ...], start: int) -> bool:
    """True when the noun phrase from ``start`` (past determiners, "of" and "user('s)")
    ends in a plural noun: its last word before a function word or a preposition ends in a
    plain ``s`` the stemmer removes ("all pull requests", "all of the user's editors",
    "all IDEs"; not "all day", "all their data")."""
    head = ""
    for w in toks[start:]:
        if not head and (w in _SKIP_ALL or w in ("user", "s")):
            continue
        if w in FUNCTION_WORDS or w in PREPOSITIONS or w in STOP_WORDS or w in _EVERY:
            break
        head = w
    return len(head) > 3 and head.endswith("s") and not head.endswith("ss") and stem(head) != head


def _passive(toks: tuple[str, ...]) -> bool:
    """True when a form of "be" comes right before a participle ("is enabled", "are kept",
    "is written"): the subject is not the doer, so word order says nothing of roles."""
    return any(w in _AUX_BE and (n.endswith("ed") or n in _IRREGULAR) for w, n in pairwise(toks))


def _regular_past(toks: tuple[str, ...]) -> bool:
    """True when the user's own verb is a regular past tense: the first word after "user"
    (past fillers and -ly adverbs) ends in "ed" ("The user lived in Toronto."), not "eed"."""
    for i, w in enumerate(toks):
        if w != "user":
            continue
        for v in toks[i + 1 :]:
            if v in FILLERS or (v.endswith("ly") and len(v) > 4):
                continue
            return len(v) > 4 and v.endswith("ed") and not v.endswith("eed")
    return False


def _roles(
    toks: tuple[str, ...], sts: tuple[str, ...], info: frozenset[str]
) -> frozenset[tuple[str, str, str]]:
    """Who comes before what: ``(before, "<", word)`` for each information word and the
    content word (or "user", or a possessive "s") right before it, function words skipped.
    Two texts that both have "user" and a word X, where one puts "user" and the other X
    right before the same word, give them different roles ("The user teaches Sam." /
    "Sam teaches the user."; "The user's manager is Priya." / "The user is Priya's
    manager.")."""
    seq = [s for w, s in zip(toks, sts, strict=True) if s in info or w in ("user", "s")]
    return frozenset((seq[i - 1], "<", seq[i]) for i in range(1, len(seq)))


_NOT_INFO = FUNCTION_WORDS | FILLERS | NEGATIONS | PREPOSITIONS | ALTERNATIVES
"""Words that are never information words (:func:`_words`)."""
_MARKING = frozenset("used no any".split())
"""The first words of the state markers ("used to", "no longer", "any more")."""
_STATE_STEMS = frozenset(_token_stem(w) for w in STATE_WORDS)
_HEDGE_STEMS = frozenset(_token_stem(w) for w in HEDGES)


@lru_cache(maxsize=8192)
def _words(text: str, rephrase: bool, /) -> _Words:
    """``text``'s words, stems and information words, once for every caller (both arguments
    positional and required: one cache entry per text and ``rephrase``). Most texts need no
    more: the twins check of every prompt (:func:`core.rules.dedupe_index.redundant`) reads
    the information words of each memory it is given and compares only the few pairs where
    one text's are all in the other's (:func:`_parse` then)."""
    raw = fact_tokens(text)
    toks = _rephrase(raw) if rephrase else raw
    sts = tuple([_token_stem(w) for w in toks])
    markers: set[str] = set()
    dropped: set[int] = set()  # negation words that are part of a state marker
    skip = _NOT_INFO
    if not _MARKING.isdisjoint(toks):
        for i, w in enumerate(toks):
            nxt = toks[i + 1] if i + 1 < len(toks) else ""
            if w == "used" and nxt == "to":
                markers.add("~used_to")
                skip = skip | {"used"}  # the marker stands for it
            elif w == "no" and nxt == "longer":
                markers.add("~no_longer")
                dropped.add(i)
                skip = skip | {"longer"}
            elif w == "any" and nxt == "more":
                markers.add("anymor")
    if "anymor" in sts or "anymor" in markers:  # "not ... anymore" is a state, not a negation
        dropped |= {i for i, w in enumerate(toks) if w in _NOT}
    past = not _SIMPLE_PAST.isdisjoint(toks) and any(
        w in _SIMPLE_PAST and (i == 0 or toks[i - 1] not in _AUXILIARIES)
        for i, w in enumerate(toks)
    )
    if past or not _PAST.isdisjoint(toks) or (rephrase and _regular_past(raw)):
        markers.add("~past")
    info = frozenset(
        [_CARDINALS.get(w, s) for w, s in zip(toks, sts, strict=True) if w not in skip]
    )
    return _Words(
        normalize(text), raw, toks, sts, frozenset(sts), info | markers, frozenset(dropped)
    )


@lru_cache(maxsize=8192)
def _parse(text: str, rephrase: bool, /) -> _Parsed:
    """``text`` parsed whole for :func:`compare`, on :func:`_words` (cached the same way)."""
    first = _words(text, rephrase)
    raw, toks, sts, info, dropped = first.raw, first.words, first.stems, first.info, first.dropped
    numbers = tuple(_CARDINALS.get(w, w) for w in toks if _is_number(w))
    negations = tuple(
        sorted(
            "not" if w in _NOT else w
            for i, w in enumerate(toks)
            if w in NEGATIONS and i not in dropped
        )
    )
    seq = tuple(
        "@" + w if w in _DIRECTED else s
        for w, s in zip(toks, sts, strict=True)
        if w in _DIRECTED or s in info
    )
    relations = frozenset(w for w in toks if w in PREPOSITIONS)
    roles = _roles(toks, sts, info) if rephrase and not _passive(raw) else frozenset()
    owned = _owned(toks, sts, info) if rephrase else None
    return _Parsed(
        first.norm, toks, first.stem_set, info, numbers, negations, relations, seq, roles, owned
    )


def _owned(
    toks: tuple[str, ...], sts: tuple[str, ...], info: frozenset[str]
) -> tuple[str, str] | None:
    """Whom the sentence is about, at its first "user", and the information word that
    follows: ``("", "call")`` for the user ("The user is called Sam."), ``("son", "call")``
    for something of theirs ("The user's son is called Sam.": the first information word
    after "user's"); None without "user"."""
    if "user" not in toks:
        return None
    at = toks.index("user")
    after = [s for s in sts[at + 1 :] if s in info]
    if at + 1 >= len(toks) or toks[at + 1] != "s" or not after:
        return ("", after[0] if after else "")
    return (after[0], after[1] if len(after) > 1 else "")


def jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    """Token-set Jaccard similarity in [0, 1]; 1.0 for two empty sets."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def screen_tokens(text: str, rephrase: bool = True) -> frozenset[str]:
    """The token set the Jaccard screen compares: the stems of ``text``'s dedupe tokens
    (after :data:`REPHRASINGS` unless ``rephrase`` is False)."""
    return _words(text, rephrase).stem_set


def info_words(text: str, rephrase: bool = True) -> frozenset[str]:
    """The stems (and markers) of ``text`` that carry information. A candidate whose set is
    not inside the known memory's is never its duplicate (:func:`compare` calls a pair a
    duplicate only when the candidate has no information word of its own): a cheap filter
    before the rule. The first half of the parse (:func:`_words`, as :func:`screen_tokens`;
    :func:`compare` parses the rest), one cache entry per text."""
    return _words(text, rephrase).info


def similarity(a: str, b: str, rephrase: bool = True) -> float:
    """The screen's score: Jaccard of the two texts' stem sets, in [0, 1]."""
    return jaccard(_words(a, rephrase).stem_set, _words(b, rephrase).stem_set)


@dataclass(frozen=True, slots=True)
class Judgement:
    """What a candidate is to one known memory, and why."""

    outcome: Outcome
    reason: Reason


def compare(candidate: str, known: str, rephrase: bool = True) -> Judgement:
    """What ``candidate`` is to ``known`` by what differs, without the screen (see the
    module docstring; ``rephrase`` False: without :func:`_rephrase` and the role check, the
    rule before issue 37). Total: any two texts, empty ones included."""
    a, b = _parse(candidate, rephrase), _parse(known, rephrase)
    if a.norm == b.norm:
        return Judgement("duplicate", "same")
    return _differences(a, b)


def _differences(a: _Parsed, b: _Parsed) -> Judgement:
    """:func:`compare` of two texts whose normal forms differ."""
    if a.negations != b.negations:
        return Judgement("distinct", "negation")
    if _swapped_roles(a, b) or _other_owner(a, b):
        return Judgement("distinct", "order")
    only_a, only_b = a.info - b.info, b.info - a.info
    # Numbers as a multiset on both sides: "number 8 on shelf 1" / "number 1 on shelf 1".
    if (
        a.numbers  # a multiset less an empty one is never empty, less itself always is
        and b.numbers
        and Counter(a.numbers) - Counter(b.numbers)
        and Counter(b.numbers) - Counter(a.numbers)
    ):
        return Judgement("distinct", "number")
    if (only_a | only_b) & _HEDGE_STEMS:
        return Judgement("distinct", "modality")
    if ALTERNATIVES & (set(a.words) ^ set(b.words)):
        return Judgement("distinct", "coordination")
    if a.relations - b.relations and b.relations - a.relations:
        return Judgement("distinct", "preposition")
    if only_a and only_b:
        return Judgement("distinct", "substitution")
    if _directions(a, b) != _directions(b, a):
        return Judgement("distinct", "order")
    if only_a:
        state = only_a & (_STATE_STEMS | {"~used_to", "~no_longer", "~past"})
        return Judgement("supersede", "state" if state else "specific")
    if only_b:
        if only_b & (_STATE_STEMS | {"~used_to", "~no_longer", "~past"}):
            return Judgement("distinct", "state")
        if b.numbers and Counter(b.numbers) - Counter(a.numbers):
            return Judgement("distinct", "number")
        return Judgement("duplicate", "general")
    return Judgement("duplicate", "same")


def _swapped_roles(a: _Parsed, b: _Parsed) -> bool:
    """True when the user and another word both texts have trade places before the same
    word (:func:`_roles`): one is the subject or owner in one text, the other in the
    other."""
    shared = a.stem_set & b.stem_set
    if "user" not in shared:
        return False
    before_a: dict[str, set[str]] = {}
    for x, _, w in a.roles:
        before_a.setdefault(w, set()).add(x)
    for y, _, w in b.roles:
        for x in before_a.get(w, ()):
            if x != y and "user" in (x, y) and x in shared and y in shared:
                return True
    return False


def _other_owner(a: _Parsed, b: _Parsed) -> bool:
    """True when one text says of the user what the other says of something of the user's
    that the first does not name, the same word following each ("The user is called Sam."
    / "The user's son is called Sam.", "The user likes jazz." / "The user's wife likes
    jazz."): another person's or thing's fact, never a more specific one of the user's."""
    if a.owned is None or b.owned is None or bool(a.owned[0]) == bool(b.owned[0]):
        return False
    (owned, then), other = (a.owned, b) if a.owned[0] else (b.owned, a)
    return owned not in other.info and then == (other.owned or ("", ""))[1] != ""


def _directions(a: _Parsed, b: _Parsed) -> set[tuple[str, str, str]]:
    """The neighbours of ``a``'s directed words that both texts have: ("over", "->",
    "space") for "tabs over spaces"; only words ``b`` has as well count."""
    shared = a.info & b.info
    both = {x for x in a.seq if x[0] == "@"} & {x for x in b.seq if x[0] == "@"}
    seq = [x for x in a.seq if x in shared or x in both]
    out = set()
    for i, x in enumerate(seq):
        if x not in both:
            continue
        word = x[1:]
        nxt = next((y for y in seq[i + 1 :] if y[0] != "@"), "")
        prev = next((y for y in reversed(seq[:i]) if y[0] != "@"), "")
        if word in _DIRECTED_NEXT:
            out.add((word, "->", nxt))
        if word in _DIRECTED_PREV:
            out.add((word, "<-", prev))
    return out


def judge(
    candidate: str, known: str, threshold: float = DEFAULT_THRESHOLD, rephrase: bool = True
) -> Judgement:
    """The whole rule for one pair, ``candidate`` proposed with ``known`` stored: equal
    after normalisation is a duplicate; below the screen at ``threshold``, distinct; else
    :func:`compare` (``rephrase``: see there)."""
    a, b = _words(candidate, rephrase), _words(known, rephrase)
    if a.norm == b.norm:
        return Judgement("duplicate", "same")
    if jaccard(a.stem_set, b.stem_set) < threshold:
        return Judgement("distinct", "screen")
    return _differences(_parse(candidate, rephrase), _parse(known, rephrase))


def is_duplicate(candidate: str, known: str, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """True when ``candidate`` adds nothing to ``known`` (:func:`judge`)."""
    return judge(candidate, known, threshold).outcome == "duplicate"


@dataclass(frozen=True, slots=True)
class Decision(Generic[R]):
    """What a write does: ``duplicate_of`` the known memory it adds nothing to (then it is
    not written), else it is written and ``supersedes`` the known memories it is a more
    specific fact (or a new state) of."""

    duplicate_of: R | None
    supersedes: tuple[R, ...] = ()


@dataclass(frozen=True, slots=True)
class Deduper:
    """Judges a candidate text against the known memories.

    ``threshold`` is the screen's minimum stem-set Jaccard, in (0, 1].
    """

    threshold: float = DEFAULT_THRESHOLD

    def judge(self, text: str, known: str) -> Judgement:
        """:func:`judge` at this threshold."""
        return judge(text, known, self.threshold)

    def match(self, text: str, known: Iterable[M]) -> M | None:
        """The known memory ``text`` adds nothing to (the exact twin, else the most similar
        duplicate), or None.

        ``known`` holds anything with a ``text`` (stored memories, or id/text rows).
        """
        norm = normalize(text)
        best: tuple[float, M] | None = None
        for memory in known:
            if normalize(memory.text) == norm:
                return memory
            score = similarity(text, memory.text)
            if (
                score >= self.threshold
                and (best is None or score > best[0])
                and compare(text, memory.text).outcome == "duplicate"
            ):
                best = (score, memory)
        return best[1] if best else None

    def decide(
        self, text: str, known: Iterable[R], *, replacing: Collection[int] = ()
    ) -> Decision[R]:
        """What writing ``text`` does to ``known`` (:class:`Decision`).

        ``replacing`` names memories the candidate supersedes anyway (a correction the
        model found): supersede comes before dedupe, so those are not compared (a
        correction is never discarded as a duplicate of what it corrects). The one
        exception is a replaced memory with the same text after normalisation, which is
        the duplicate: replacing a memory by its own words changes nothing.
        """
        rows = list(known)
        norm = normalize(text)
        for row in rows:
            if row.id in replacing and normalize(row.text) == norm:
                return Decision(row)
        others = [row for row in rows if row.id not in replacing]
        twin = self.match(text, others)
        if twin is not None:
            return Decision(twin)
        narrower = tuple(row for row in others if self.judge(text, row.text).outcome == "supersede")
        return Decision(None, narrower)
