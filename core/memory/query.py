"""What recall searches for a message: the message, and for a message that leans on the
conversation ("and the other one?", "what about her?") the thread's previous user message too.
"""

from __future__ import annotations

import re

_OPENER = re.compile(
    r"^\s*(?:and|or|but|also|what about|how about|and what about|same for|what of|the other"
    r"|und|et|y|e)\b",
    re.IGNORECASE,
)
_POINTING = re.compile(
    r"\b(?:it|its|that|this|those|these|them|they|their|her|him|his|she|he|there|one|ones"
    r"|the other|the same)\b",
    re.IGNORECASE,
)
SHORT_WORDS = 6
"""A message of at most this many words that leans on the conversation borrows its query."""


def recall_query(text: str, previous: str | None) -> str:
    """``text``, with ``previous`` (the conversation's previous user message) prepended when
    ``text`` is short (at most :data:`SHORT_WORDS` words) and leans on what came before (it
    opens with "and", "what about", ... or holds a pointing word: "it", "her", "that one",
    "there", ...); else ``text`` alone."""
    if not previous or not previous.strip() or len(text.split()) > SHORT_WORDS:
        return text
    if not (_OPENER.search(text) or _POINTING.search(text)):
        return text
    return f"{previous}\n{text}"
