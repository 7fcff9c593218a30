"""Offline labels for a memory: kind and category by rule, and first person made third.

``/remember``, the CLI's ``memories remember`` and ``memories import`` (lines without a kind)
need labels without a model call (they work with no API key), and the standing profile
(:mod:`core.memory.profile`) is chosen by those labels. The rule, in order:

* **kind**: ``correction`` when the text says something changed ("no longer", "not ...
  anymore", "actually", "now ... instead", "moved to"); ``preference`` when it states a
  liking or a way of working ("prefers", "likes", "hates", "wants", "always", "never",
  "rather", "favourite", "please"); ``context`` when it is a standing fact about who the user
  is (name, role, job, team, employer, where they live or work, time zone, languages,
  family, pets, health constraints such as allergies or diets); else ``fact``;
* **category**: ``communication`` (how answers should be: language, length, tone, format),
  ``code`` (languages, style, formatting, tests), ``tools`` (editors, OS, services,
  frameworks), ``workflow`` (releases, reviews, meetings, schedules), else ``general``;
  the first family with a cue word in the text wins, in that order;
* a **one-off** (a question, or text tied to a moment: "today", "tomorrow", "this week",
  "right now") is a plain ``fact``/``general`` whatever its cues, so the standing profile
  never carries it into every prompt (recall still finds it).

English cue words only; text in other languages keeps ``fact``/``general`` unless a cue
matches. :func:`third_person` rewrites "I prefer tabs" as "The user prefers tabs." when the
sentence is simple enough to do so safely (see its docstring), else leaves it as typed.
"""

from __future__ import annotations

import re
from typing import get_args

from core.types import Category, Kind

_CORRECTION = re.compile(
    r"\b(no longer|not any ?more|anymore|actually|instead of|instead|moved to|switched to|"
    r"changed (?:to|from)|used to|now (?:uses|prefers|lives|works))\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(prefers?|preferred|preference|likes?|loves?|enjoys?|hates?|dislikes?|wants?|"
    r"would rather|rather than|favou?rite|always|never|please|avoid|avoids|can't stand)\b",
    re.IGNORECASE,
)
_CONTEXT = re.compile(
    r"\b(name is|named|called|lives?|living|based in|moved|born|grew up|"
    r"works? (?:at|for|as|in|on)|job|role|is an? (?:\w+ )?(?:engineer|developer|designer|"
    r"manager|lead|scientist|analyst|student|teacher|doctor|nurse|founder|writer|admin|"
    r"researcher|architect|consultant)|team|company|employer|colleague|boss|manager|"
    r"time ?zone|utc|gmt|cet|pst|est|speaks?|native|fluent|mother tongue|"
    r"allerg\w*|intoleran\w*|vegan|vegetarian|gluten|diabet\w*|halal|kosher|"
    r"wife|husband|partner|son|daughter|kids?|children|brother|sister|mother|father|"
    r"parents?|dogs?|cats?|pets?|birthday|pronouns?|diet)\b",
    re.IGNORECASE,
)
_CATEGORIES: tuple[tuple[Category, re.Pattern[str]], ...] = (
    (
        "communication",
        re.compile(
            r"\b(answers?|repl(?:y|ies)|responses?|explain\w*|concise|brief|short|verbose|"
            r"detailed|bullet|bullets|tone|formal|informal|emoji|language|english|german|"
            r"french|spanish|portuguese|japanese|summar\w*|examples?|jargon|wording)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "code",
        re.compile(
            r"\b(code|coding|tabs?|spaces|indent\w*|python|go|golang|rust|java|javascript|"
            r"typescript|kotlin|swift|ruby|php|c\+\+|c#|sql|haskell|scala|elixir|functions?|"
            r"variables?|naming|types?|typing|tests?|testing|lint\w*|format\w*|snake_case|"
            r"camelcase|comments?|docstrings?|refactor\w*|async|classes)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "tools",
        re.compile(
            r"\b(editor|ide|vim|neovim|emacs|vs ?code|vscode|jetbrains|pycharm|intellij|"
            r"terminal|shell|bash|zsh|fish|tmux|git|github|gitlab|docker|kubernetes|k8s|"
            r"helm|terraform|aws|gcp|azure|linux|macos|mac|windows|ubuntu|debian|postgres\w*|"
            r"mysql|sqlite|redis|kafka|nginx|django|flask|fastapi|react|vue|svelte|"
            r"browser|firefox|chrome|laptop|keyboard|uv|pip|poetry|npm|yarn|pnpm)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "workflow",
        re.compile(
            r"\b(deploy\w*|release\w*|ships?|shipping|reviews?|pull requests?|prs?|merge\w*|"
            r"standups?|sprints?|tickets?|jira|linear|meetings?|on-?call|schedule\w*|"
            r"mornings?|evenings?|weekends?|mondays?|tuesdays?|wednesdays?|thursdays?|"
            r"fridays?|deadlines?|ci|cd|pipeline|branch\w*|commits?|workflow|process)\b",
            re.IGNORECASE,
        ),
    ),
)


# A one-off: text tied to a day or a moment ("tomorrow", "this week", "right now"), a
# reminder ("please remind me to call Bob") or a question. Labelled a plain general fact,
# so it is recall's and never enters every prompt through the standing profile (which
# leaves plain general facts out).
_ONE_OFF = re.compile(
    r"\b(today|tonight|tomorrow|yesterday|right now|at the moment|this (?:morning|afternoon|"
    r"evening|week|weekend|month)|next (?:week|weekend|month)|later today|"
    r"in (?:an|one|a few|\d+) (?:hours?|minutes?|days?)|remind (?:me|the user))\b|\?\s*$",
    re.IGNORECASE,
)


def classify(text: str) -> tuple[Kind, Category]:
    """``(kind, category)`` of a memory's text by the module's rule; ``("fact", "general")``
    when no cue matches, and for a one-off (a question, or text tied to today, tomorrow,
    this week...: ``_ONE_OFF``). Pure and fast (a few regular expressions)."""
    if _ONE_OFF.search(text):
        return "fact", "general"
    kind: Kind = "fact"
    if _CORRECTION.search(text):
        kind = "correction"
    elif _PREFERENCE.search(text):
        kind = "preference"
    elif _CONTEXT.search(text):
        kind = "context"
    category: Category = "general"
    for name, pattern in _CATEGORIES:
        if pattern.search(text):
            category = name
            break
    return kind, category


assert set(get_args(Category)) == {c for c, _ in _CATEGORIES} | {"general"}

# First person -> third person. Only sentences that start with "I", "I'm", "I've", "I'd",
# "My" (or "Me and" never) are rewritten, and only when nothing left in them would read wrong
# afterwards: no second "I"/"we"/"you", no quotation marks (someone else's words).
_START = re.compile(r"^(i'm|i am|i've|i have|i'd|i|my)(?=\s|$)\s*", re.IGNORECASE)
_REST_BLOCKERS = re.compile(
    r"\b(i|we|us|our|ours|you|your|yours|i'm|i've|i'd|i'll)\b|[\"“”]", re.IGNORECASE
)
_IRREGULAR = {
    "am": "is",
    "have": "has",
    "do": "does",
    "go": "goes",
    "was": "was",
    "can": "can",
    "could": "could",
    "will": "will",
    "would": "would",
    "should": "should",
    "must": "must",
    "may": "may",
    "might": "might",
    "shall": "shall",
    "don't": "doesn't",
    "dont": "doesn't",
    "can't": "can't",
    "cannot": "cannot",
    "won't": "won't",
    "didn't": "didn't",
    "wasn't": "wasn't",
    "haven't": "hasn't",
    "hate": "hates",
    "used": "used",
    "never": "never",
    "always": "always",
    "usually": "usually",
    "often": "often",
    "also": "also",
    "only": "only",
    "really": "really",
    "mostly": "mostly",
    "still": "still",
    "just": "just",
    "now": "now",
    "no": "no",
    "sometimes": "sometimes",
    "rarely": "rarely",
}
_ADVERBS = {
    "never",
    "always",
    "usually",
    "often",
    "also",
    "only",
    "really",
    "mostly",
    "still",
    "just",
    "now",
    "sometimes",
    "rarely",
}
_OBJECT = re.compile(r"\b(me|myself|mine|my)\b", re.IGNORECASE)
_OBJECTS = {"me": "them", "myself": "themselves", "mine": "theirs", "my": "their"}
# Verbs ending in -ed that are present tense; every other -ed word is taken as a past tense,
# which reads the same in the third person ("I moved" -> "The user moved").
_PRESENT_ED = {"need", "feed", "breed", "bleed", "speed", "proceed", "succeed", "exceed"}
_PAST = {
    "had",
    "went",
    "got",
    "bought",
    "made",
    "took",
    "left",
    "began",
    "wrote",
    "grew",
    "came",
    "found",
    "lost",
    "met",
    "sold",
    "spent",
    "won",
    "broke",
    "ran",
    "knew",
    "thought",
    "felt",
    "kept",
    "quit",
    "became",
    "did",
    "gave",
    "built",
    "taught",
    "drove",
    "flew",
    "chose",
    "told",
    "said",
    "sent",
    "heard",
    "saw",
    "paid",
    "held",
    "brought",
    "caught",
    "forgot",
    "spoke",
    "understood",
    "slept",
    "wore",
    "threw",
    "fell",
    "led",
    "meant",
    "woke",
    "stood",
    "sat",
    "rode",
    "swam",
    "sang",
}
# First words after "I" that are not a present-tense verb of "I" (so no "The user ands"):
# conjunctions, colloquial contractions, and third-person forms.
_NOT_VERBS = {"and", "or", "but", "nor", "kinda", "sorta", "wanna", "gonna", "gotta", "are", "were"}


def _third_person_verb(verb: str) -> str | None:
    """``prefer`` -> ``prefers``; None when ``verb`` does not look like a plain verb."""
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if not re.fullmatch(r"[a-z]+", low) or low.endswith("ing") or low in _NOT_VERBS:
        return None
    if low.endswith("s") and not low.endswith(("ss", "us")):  # "I does", "I is": not "I"'s
        return None
    if low in _PAST or (low.endswith("ed") and low not in _PRESENT_ED):
        return low
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return low + "es"
    if len(low) > 2 and low.endswith("y") and low[-2] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


def third_person(text: str) -> str:
    """``text`` in the third person when that is safe, else ``text`` unchanged.

    ``"I prefer tabs over spaces"`` -> ``"The user prefers tabs over spaces."``;
    ``"I'm allergic to peanuts"`` -> ``"The user is allergic to peanuts."``;
    ``"My dog is called Rex"`` -> ``"The user's dog is called Rex."``;
    ``"I never use light mode"`` -> ``"The user never uses light mode."``.
    Left as typed: text that does not start with I/I'm/I've/I'd/My followed by a space,
    questions (ending in "?"), text with another first- or second-person word later on
    ("I told my boss you ..."), quotations, and text whose first word after "I" is not a
    plain present-tense verb ("I and ...", "I kinda ...", "I does ..."). A typographic
    apostrophe (I’m, as phones type it) counts as ``'``. A trailing ``,``/``;``/``:`` is
    dropped and a full stop added when a rewritten sentence has no closing punctuation.
    """
    stripped = text.strip().replace("\u2019", "'")  # a phone's apostrophe: I\u2019m
    match = _START.match(stripped)
    if not match or stripped.endswith("?"):  # a question is not a statement to rewrite
        return text
    rest = stripped[match.end() :].rstrip(",;: ")
    if not rest or _REST_BLOCKERS.search(rest):
        return text
    lead = match.group(1).lower()
    if lead == "my":
        body = f"The user's {rest}"
    elif lead in ("i'm", "i am"):
        body = f"The user is {rest}"
    elif lead in ("i've", "i have"):
        body = f"The user has {rest}"
    elif lead == "i'd":
        body = f"The user would {rest}"
    else:
        words = rest.split(" ")
        verbs: list[str] = []
        while words and words[0].lower() in _ADVERBS:
            verbs.append(words.pop(0))
        if not words:
            return text
        verb = _third_person_verb(words[0])
        if verb is None:
            return text
        body = "The user " + " ".join([*verbs, verb, *words[1:]])
    body = _OBJECT.sub(lambda m: _OBJECTS[m.group(1).lower()], body)
    if body[-1] not in ".!?":
        body += "."
    return body
