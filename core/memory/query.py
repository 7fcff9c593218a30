"""What recall searches for a message: the message, and for a message that leans on the
conversation ("and the other one?", "what about her?") the thread's previous user message too.
"""

from __future__ import annotations

import re

_LEANING = re.compile(
    r"^\s*(?:and|or|but|also|what about|how about|and what about|same for|what of|the other"
    r"|und|et|y|e)\b|\b(?:it|that|this|those|these|them|they|her|him|she|he|the other one"
    r"|the same)\b[^\w]*$",
    re.IGNORECASE,
)
SHORT_WORDS = 6
"""A message of at most this many words that leans on the conversation borrows its query."""


def recall_query(text: str, previous: str | None) -> str:
    """``text``, with ``previous`` (the conversation's previous user message) prepended when
    ``text`` is short and leans on what came before; else ``text`` alone."""
    if not previous or len(text.split()) > SHORT_WORDS or not _LEANING.search(text):
        return text
    return f"{previous}\n{text}"
