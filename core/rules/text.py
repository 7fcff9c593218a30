"""Text handling shared by recall and dedupe: normalisation, tokens, stems, index terms.

Index terms are made in Python, not by an FTS5 tokenizer, so that every term can carry the
owner's user id (``u{uid}_{stem}``): a recall query then reads only that user's postings in
the FTS5 index, however many other users share the file (see :mod:`core.store.sqlite.store`).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from functools import lru_cache

import snowballstemmer

# Word tokens: runs of letters and digits in any script (``\w`` less the underscore).
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SPACE = re.compile(r"\s+")
_ASCII_ALNUM = re.compile(r"^[a-z0-9]+$")

# Standard English stop words (the classic Lucene/Snowball list, trimmed): dropped from
# recall queries only, so documents keep their true lengths for BM25 length normalisation.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t don doesn didn isn wasn aren weren won wouldn shouldn couldn ll ve re d m
    user users""".split()
)
# "user" is in the list on purpose: every memory is phrased "The user ...", so the word
# carries no information in recall (it appears in nearly every document).

_stemmer = snowballstemmer.stemmer("english")


# Text hygiene (the one rule for every path into the store: remember, reflection, import,
# cleanup, messages, turns). Removed: C0 and C1 control characters (U+0000-001F, U+007F-009F)
# but tab and newline; bidirectional embeddings, overrides and isolates (U+202A-202E,
# U+2066-2069, which can make stored text read differently from what it says); U+200B (zero
# width space); U+FEFF (BOM / zero width no-break space); lone surrogates (from JSON "\ud800":
# not encodable as UTF-8, so neither SQLite nor PostgreSQL could store them). Kept: U+200C/
# U+200D (ZWNJ/ZWJ: part of Persian and Indic spelling and of emoji sequences such as
# U+1F469 U+200D U+1F4BB), U+200E/U+200F (LRM/RLM marks) and every other character. NUL must
# go before the store: PostgreSQL refuses it in text outright.
_LINE_ENDS = str.maketrans({"\r": "\n", "\x0b": "\n", "\x0c": "\n", "\x85": "\n"})
REMOVED_CHARS = "\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\u200b\u202a-\u202e\u2066-\u2069\ufeff"
"""The characters :func:`clean_text` removes, as a regular-expression class body (after CR,
VT, FF and NEL became newlines); lone surrogates are removed as well."""
_REMOVED = re.compile(f"[{REMOVED_CHARS}\ud800-\udfff]")
_DIRTY = re.compile(f"[{REMOVED_CHARS}\r\x0b\x0c\x85\ud800-\udfff]")


def clean_text(text: str, *, keep_newlines: bool) -> str:
    """``text`` as it may be stored: control and invisible formatting characters removed.

    Line ends become ``\\n`` (CRLF, CR, VT, FF and NEL U+0085 alike); with
    ``keep_newlines`` (messages, turns) newlines and tabs stay and nothing else changes;
    without it (memories: one line) all whitespace runs collapse to one space and the ends
    are stripped. See ``REMOVED_CHARS`` for what goes and why ZWJ/ZWNJ stay. Idempotent.
    """
    if _DIRTY.search(text):
        text = _REMOVED.sub("", text.replace("\r\n", "\n").translate(_LINE_ENDS))
    return text if keep_newlines else " ".join(text.split())


def needs_cleaning(text: str) -> bool:
    """Whether ``text`` holds a character :func:`clean_text` removes or rewrites (a line end
    other than ``\\n``), whatever the whitespace; cheap, for scanning stored rows."""
    return _DIRTY.search(text) is not None


def visible(text: str) -> str:
    """``clean_text(text, keep_newlines=False)``: the one-line form memories take."""
    return clean_text(text, keep_newlines=False)


def normalize(text: str) -> str:
    """Case- and whitespace-insensitive form used for exact dedupe.

    NFKC, casefold, inner whitespace collapsed, trailing sentence punctuation dropped.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _SPACE.sub(" ", text).strip()
    return text.rstrip(" .!?;:").strip()


# Names that a plain word tokenizer would destroy ("C++" -> "c"), kept as one word.
_SPECIAL = re.compile(r"(?<![^\W_])(c\+\+|c#|f#|\.net)(?![^\W_])")
_SPECIAL_WORDS = {"c++": "cplusplus", "c#": "csharp", "f#": "fsharp", ".net": "dotnet"}


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits of any script), in order.

    ``C++``, ``C#``, ``F#`` and ``.NET`` are kept as words (``cplusplus`` ...).
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _SPECIAL.sub(lambda m: " " + _SPECIAL_WORDS[m.group(1)] + " ", text)
    return _WORD.findall(text)


# Dedupe's tokens (:func:`fact_tokens`): what a fact is made of beyond words. Order matters:
# the first alternative that matches at a position wins.
_FACT = re.compile(
    r"""
     (?P<url>https?://[^\s<>"']+)
    |(?P<email>[^\W_][\w.+-]*@[^\W_][\w-]*(?:\.[\w-]+)+)
    |(?P<handle>(?<![\w@])@[^\W_][\w.-]*)
    |(?P<path>(?<![\w/])(?:~|\.\.?)?/[\w.-]+(?:/[\w.-]+)+/?|(?<![\w/])~/[\w.-]+)
    |(?P<signed>(?:(?<![^\W_])|(?<=utc)|(?<=gmt))[+-]\d+(?:[.:]\d+)*)
    |(?P<version>(?<![^\W_])v?\d+(?:[.:]\d+)+)
    |(?P<special>(?<![^\W_])(?:c\+\+|c\#|f\#|\.net)(?![^\W_]))
    |(?P<word>[^\W_]+)
    |(?P<other>[^\w\s]+)
    """,
    re.VERBOSE,
)
# A hyphen after a single letter or "co" joins a prefix that is no word of its own to its word,
# as the closed spelling writes it: "e-mail" is "email", "co-worker" "coworker", "t-shirt"
# "tshirt". Other hyphens part words as a space does ("open-source" is "open source"; "ex-wife"
# keeps its "ex", a state word).
_PREFIXED = re.compile(r"(?<![^\W_])([^\W\d_]|co)[-\u2010\u2011](?=[^\W\d_]{2})")
_KEPT_ASCII = frozenset("$%+<=>")
_JOINERS = frozenset("\u200d\ufe0f")  # ZWJ and emoji presentation: part of an emoji


def _symbols(run: str) -> str:
    """The symbols of a run of non-word characters (currency, emoji, math, ``%``), as one
    token; punctuation dropped. ``"★★★."`` -> ``"★★★"``, ``"(!"`` -> ``""``."""
    kept = [
        ch
        for ch in run
        if ch in _KEPT_ASCII
        or ch in _JOINERS
        or (not ch.isascii() and unicodedata.category(ch)[0] == "S")
    ]
    return "".join(kept).strip("\u200d\ufe0f")


_ASCII_WORD = re.compile(r"[a-z0-9]+")
_NOT_PLAIN = re.compile(r"[@/+\-#$%<=>]|\d[.:]\d|\.net")
"""In lower-cased ASCII text, what any token of :data:`_FACT` but a word needs (an address's
``@``, a URL's or a path's ``/``, a sign, a version's ``3.11``, ``c++``, ``c#``, ``.net``,
a hyphen :data:`_PREFIXED` joins) or a symbol :func:`_symbols` keeps: text with none of
them is made of words alone."""


@lru_cache(maxsize=8192)
def fact_tokens(text: str) -> tuple[str, ...]:
    """Dedupe's tokens of ``text``, in order: :func:`words`, plus what a plain word
    tokenizer drops but a fact turns on: URLs, e-mail addresses, @handles and paths whole
    (``a@example.com``), versions and dotted numbers (``3.11``, ``192.168.1.10``), signed
    numbers (``UTC+1`` -> ``utc``, ``+1``) and runs of symbols (``€``, ``$``, ``%``, ``🍕``,
    ``★★★``). Lower-cased (NFKC, casefold); URLs, addresses and paths lose trailing
    punctuation; a single letter or "co" hyphenated to a word is joined to it (``e-mail`` ->
    ``email``, ``co-worker`` -> ``coworker``; other hyphens part words). Recall keeps
    :func:`words` (the index terms are unchanged).

    Plain ASCII text (words, spaces and punctuation no token keeps, :data:`_NOT_PLAIN`), as
    most memories are, takes a shortcut to the same tokens: its runs of letters and digits
    (NFKC leaves ASCII as it is, casefold lower-cases it), about a tenth of the scan's cost.
    """
    if text.isascii():
        lower = text.lower()
        if _NOT_PLAIN.search(lower) is None:
            return tuple(_ASCII_WORD.findall(lower))
    return scanned_tokens(text)


def scanned_tokens(text: str) -> tuple[str, ...]:
    """:func:`fact_tokens` by the full scan (:data:`_FACT`), whatever the text."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2212", "-")
    text = _PREFIXED.sub(r"\1", text)
    out: list[str] = []
    for m in _FACT.finditer(text):
        kind, token = m.lastgroup, m.group()
        if kind == "word":
            out.append(token)
        elif kind == "special":
            out.append(_SPECIAL_WORDS[token])
        elif kind == "other":
            if symbols := _symbols(token):
                out.append(symbols)
        elif kind in ("url", "email", "handle", "path"):
            out.append(token.rstrip(".,;:!?)-"))
        else:
            out.append(token)
    return tuple(out)


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Snowball (Porter 2) English stem of one lower-cased word; other scripts pass through."""
    if word.isascii():
        return str(_stemmer.stemWord(word))
    return word


def _encode(term: str) -> str:
    # FTS5's unicode61 tokenizer must keep each index term whole: ASCII [a-z0-9] stays as
    # it is; anything else (CJK, accented words) becomes a short stable hash.
    if _ASCII_ALNUM.match(term):
        return term
    return "h" + hashlib.blake2b(term.encode("utf-8"), digest_size=8).hexdigest()


def stems(text: str, *, drop_stop_words: bool = False) -> list[str]:
    """Stemmed tokens of ``text`` in order (with repeats), optionally without stop words."""
    out = []
    for w in words(text):
        if drop_stop_words and w in STOP_WORDS:
            continue
        out.append(stem(w))
    return out


def index_terms(uid: int, text: str) -> list[str]:
    """The FTS5 terms of one memory of user ``uid``: ``u{uid}_{stem}`` per token, in order."""
    prefix = f"u{uid}_"
    return [prefix + _encode(s) for s in stems(text)]


def query_terms(uid: int, text: str) -> list[str]:
    """Distinct FTS5 terms for a recall query of user ``uid`` (stop words dropped).

    A query made only of stop words keeps them, so "what do I use" still finds something.
    """
    raw = stems(text, drop_stop_words=True) or stems(text)
    prefix = f"u{uid}_"
    seen: dict[str, None] = {}
    for s in raw:
        seen.setdefault(prefix + _encode(s), None)
    return list(seen)


_DATA_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def as_data(value: object) -> str:
    """``value`` as one line of JSON, safe inside a tagged block: ``<`` and ``>`` escaped,
    and so are the line breaks JSON leaves raw (NEL U+0085, LINE SEPARATOR U+2028,
    PARAGRAPH SEPARATOR U+2029: ``str.splitlines`` and readers break lines at them), so no
    value (a display name, a memory stored before text hygiene) can start a line of its
    own."""
    return json.dumps(value, ensure_ascii=False).translate(_DATA_ESCAPES)
