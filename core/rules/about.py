"""Whose fact a memory is: the user's, or another person's; and whether it is a fact at all.

``/remember``, the CLI's ``memories remember`` and ``memories import`` label a memory without
a model call (:func:`whose`); reflection asks the model (its schema's ``about``). A memory
about another person is written so that no reader can take it as the user's ("my manager
prefers short emails" -> "The user's manager prefers short emails.", about "the user's
manager"), and it never enters the standing profile (:mod:`core.memory.profile`): recall
finds it when a message is about that person. The rule, in order:

* **hypothetical**: text that supposes rather than asserts ("if I had a dog ...", "suppose
  I moved to Berlin", "what if ...", "imagine ...", "let's say ...", "hypothetically ...",
  "I would ... if ...") is no fact at all (``fact`` False); words in quotes are not read;
* **a relation of the user's** at the start ("my manager", "our biggest customer", "my
  new manager Tom", "The user's wife"; :data:`RELATIONS`): about that person, named when a
  capitalised name follows the relation ("Sarah"), else described ("the user's manager").
  "my partner and I ..." is the user's (both);
* **a named person with where they belong** ("Sarah on my team is ...", "Priya from the
  data team ...") or **a named person's words** ("Sarah said ...", "Tom told me ..."):
  about that name;
* anything else is the user's: first person ("I ...", "my dog ..."), "The user ...", and
  the user's team, company or product ("my team deploys on Fridays": the user's
  environment, :doc:`memory`).

Another person's text: "my"/"our" at the start becomes "The user's", a name after the
relation is set off by commas ("The user's manager, Sarah, ..."), a "where they belong"
part too ("Sarah, on the user's team, is ..."), and "me"/"my"/"I" after it, outside quotes,
become "the user"/"the user's". The user's own text goes through
:func:`core.rules.classify.third_person` as before. English only; anything the rule does
not recognise is the user's (the behaviour before it existed).

Measured on the labelled cases in ``core/data/about_cases.jsonl`` by
:mod:`core.evaluation.about` (``python bench/about.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.rules.classify import third_person

RELATIONS = (
    "manager|boss|lead|mentor|cto|ceo|cfo|founder|partner|wife|husband|girlfriend|boyfriend|"
    "fianc[eé]e?|spouse|son|daughter|kids?|child|children|toddler|baby|colleague|co-?worker|"
    "teammate|customer|client|mom|mum|mother|dad|father|brother|sister|sibling|friend|"
    "room-?mate|flatmate|neighbou?r|landlord|landlady|doctor|dentist|therapist|parents?|"
    "grand(?:mother|father|ma|pa|parents?)|aunt|uncle|cousin|nephew|niece|report|intern|"
    "assistant|accountant|lawyer|tenant|student|boss"
)
_REL = re.compile(
    rf"^(?P<lead>(?i:my|our|the user's))\s+"
    rf"(?P<rel>(?i:(?:[a-z][a-z-]*\s+){{0,2}}?(?:{RELATIONS})s?))"
    r"(?P<poss>'s)?\b(?P<name>,?\s+[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?,?(?=\s))?"
)
_JOINT = re.compile(r"^\s*(and|&)\s+(i|me|the user)\b", re.IGNORECASE)
_NAME = r"(?P<name>[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)"
_NOT_NAMES = {
    "I", "The", "My", "Our", "We", "If", "This", "That", "These", "Those", "It", "There",
    "What", "When", "Suppose", "Imagine", "Let", "In", "On", "At", "From", "Please",
}  # fmt: skip
_BELONGS = re.compile(
    rf"^{_NAME}\s+(?P<mod>(?:on|in|from|at|of)\s+(?:(?:my|our|the)\s+)?[\w-]+(?:\s+team)?)\s+"
    r"(?P<rest>\S.*)$"
)
_SAYS = re.compile(
    rf"^{_NAME}\s+(?:always\s+|often\s+|keeps\s+)?(?:said|says|saying|told|tells|wrote|writes|"
    r"asked|asks|thinks|mentioned)\b"
)
_QUOTED = re.compile(r"[\"“][^\"“”]*[\"”]|'[^']{3,}'(?=\W|$)")
_HYPOTHETICAL = re.compile(
    r"^(?:suppose|supposing|imagine|what if|hypothetically|let's say|lets say|say that|"
    r"assuming|in case|in the event|were i|had i)\b"
    r"|\b(?:would|'d|could|might)\b.*\bif\b|\bif\b.*\b(?:would|'d|could|might)\b",
    re.IGNORECASE,
)
# "I'd like ... if possible" is a polite preference, not a supposition; "if I ask for code,
# answer in Python" a standing instruction: only a conditional with would/could/might is one.
_POLITE = re.compile(r"\b(?:would|'d)\s+(?:like|prefer|rather|love|appreciate)\b", re.IGNORECASE)
_FIRST = re.compile(r"\b(me|myself|my|mine|i)\b(?!')", re.IGNORECASE)
_FIRST_OUT = {"me": "the user", "myself": "the user", "my": "the user's", "mine": "the user's"}


@dataclass(frozen=True, slots=True)
class Whose:
    """What :func:`whose` found: ``text`` as it should be stored; ``about`` None for the
    user, else the other person ("Sarah", "the user's manager"); ``fact`` False for a
    hypothetical (nothing to store)."""

    text: str
    about: str | None = None
    fact: bool = True


def _outside_quotes(text: str) -> str:
    return _QUOTED.sub(" ", text)


def _others_words(text: str) -> str:
    """``me``/``my``/``I`` outside quotes as the user; a full stop at the end."""
    parts = re.split(r"([\"“][^\"“”]*[\"”])", text)
    for i in range(0, len(parts), 2):
        parts[i] = _FIRST.sub(lambda m: _FIRST_OUT.get(m.group(1).lower(), "the user"), parts[i])
    out = "".join(parts).rstrip(",;: ")
    return out if out[-1:] in (".", "!", "?") else out + "."


def _lead(lead: str) -> str:
    return "The user's"


def whose(text: str) -> Whose:
    """Whose fact ``text`` (one memory, cleaned) is, and its text as stored: see the
    module's rule. Pure and fast (a few regular expressions)."""
    stripped = text.strip().replace("\u2019", "'")
    if not stripped:
        return Whose(text)
    if _HYPOTHETICAL.search(_POLITE.sub(" ", _outside_quotes(stripped))):
        return Whose(text, None, fact=False)
    m = _REL.match(stripped)
    if m and not _JOINT.match(stripped[m.end() :]):
        rel = m.group("rel")
        name = (m.group("name") or "").strip(" ,")
        rest = stripped[m.end() :].lstrip(" ,")
        if m.group("poss"):  # "my son's name is Leo": about the son
            body = f"The user's {rel}'s {rest}"
            return Whose(_others_words(body), f"the user's {rel.lower()}")
        if name:
            body = f"The user's {rel}, {name}, {rest}"
            return Whose(_others_words(body), name)
        body = f"The user's {rel} {rest}"
        return Whose(_others_words(body), f"the user's {rel.lower()}")
    m = _BELONGS.match(stripped)
    if m and m.group("name").split()[0] not in _NOT_NAMES:
        mod = re.sub(r"\b(my|our)\b", "the user's", m.group("mod"), flags=re.IGNORECASE)
        body = f"{m.group('name')}, {mod}, {m.group('rest')}"
        return Whose(_others_words(body), m.group("name"))
    m = _SAYS.match(stripped)
    if m and m.group("name").split()[0] not in _NOT_NAMES:
        return Whose(_others_words(stripped), m.group("name"))
    return Whose(third_person(text))


def person_key(about: str | None) -> str:
    """The key two memories about the same person share (:func:`same_person`): ``""`` for
    the user, else the name case-folded."""
    return (about or "").casefold()


def same_person(a: str | None, b: str | None) -> bool:
    """Whether two memories' ``about`` name the same person (None, the user, only matches
    None; names compare case-insensitively). Dedupe compares only such memories: "The
    user's manager prefers short emails." is no more specific version of "The user prefers
    short emails.", and the user's preference no duplicate of the manager's."""
    return person_key(a) == person_key(b)
