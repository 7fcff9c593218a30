"""Block Kit pieces the Slack commands share: mrkdwn escaping, sections and buttons.

Limits (https://api.slack.com/reference/block-kit/blocks): a section's text is at most
3,000 characters, a message at most 50 blocks.
"""

from __future__ import annotations

import re
from typing import Any

JsonDict = dict[str, Any]

MAX_SECTION_CHARS = 3000
"""Slack's limit on a section block's text."""
MAX_BLOCKS = 50
"""Slack's limit on the blocks of one message."""


def escape_mrkdwn(text: str) -> str:
    """Escape ``&``, ``<`` and ``>`` as Slack's mrkdwn requires (no mentions, no links)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_MENTION_OPENER = re.compile(r"<(?=[!@#])")


def inert_mentions(text: str) -> str:
    """``text`` with every mention and broadcast made inert, for ``markdown_text``.

    Slack parses ``<@U123>``, ``<!here>``, ``<!channel>``, ``<!everyone>``,
    ``<!subteam^S123>`` (and ``<#C123>``) as mentions in message text; ``<``, ``>`` and ``&``
    are its control characters, and the documented way to show one as text is its HTML
    entity (https://docs.slack.dev/messaging/formatting-message-text#escaping). So each ``<``
    that opens such a token becomes ``&lt;``: the reader sees ``<!here>``, nobody is
    notified. Other ``<`` (``a < b``, links) are left as they are. Stateless per character
    pair, so it can be applied to pieces of a stream provided a piece never ends in ``<``
    (:class:`MentionEscaper` holds such a ``<`` back).
    """
    return _MENTION_OPENER.sub("&lt;", text)


class MentionEscaper:
    """:func:`inert_mentions` over a text that arrives in pieces: a piece ending in ``<`` is
    sent without it, and the ``<`` goes with the next piece (or with ``flush()``). ``held``
    is what is kept back ("" or "<"); a caller may save and restore it to undo a piece."""

    def __init__(self) -> None:
        self.held = ""

    def piece(self, text: str) -> str:
        """The escaped text that can be sent now."""
        text = self.held + text
        self.held = "<" if text.endswith("<") else ""
        return inert_mentions(text[: len(text) - len(self.held)])

    def flush(self) -> str:
        """What is held back (a ``<`` at the very end opens nothing: it goes as it is)."""
        held, self.held = self.held, ""
        return held


def clip_mrkdwn(text: str, limit: int = MAX_SECTION_CHARS) -> str:
    """Escaped ``text`` cut to ``limit`` characters (ending with "…"), never inside an
    ``&amp;``-style entity."""
    if len(text) <= limit:
        return text
    return re.sub(r"&[a-z]*$", "", text[: limit - 1]) + "…"


def section(text: str) -> JsonDict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def context(text: str) -> JsonDict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def button(text: str, action_id: str, value: str, style: str | None = None) -> JsonDict:
    element: JsonDict = {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action_id,
        "value": value,
    }
    if style is not None:
        element["style"] = style
    return element


FEEDBACK_ACTION = "selfmind_feedback"
"""``action_id`` of the thumbs up / down under a finished answer."""


def feedback_blocks(*, asker: str, answers_ts: str) -> list[JsonDict]:
    """Slack's feedback buttons for an answer: a ``context_actions`` block holding one
    ``feedback_buttons`` element (https://docs.slack.dev/reference/block-kit/blocks/
    context-actions-block; slack_sdk ``ContextActionsBlock`` / ``FeedbackButtonsElement``:
    button text at most 75 characters, value at most 2,000). Each button's value is
    ``"up|down:{asker}:{answers_ts}"``: who may rate, and which message was answered."""

    def choice(sign: str, text: str, label: str) -> JsonDict:
        return {
            "text": {"type": "plain_text", "text": text},
            "accessibility_label": label,
            "value": f"{sign}:{asker}:{answers_ts}",
        }

    return [
        {
            "type": "context_actions",
            "elements": [
                {
                    "type": "feedback_buttons",
                    "action_id": FEEDBACK_ACTION,
                    "positive_button": choice("up", "👍", "This answer was helpful"),
                    "negative_button": choice("down", "👎", "This answer was not helpful"),
                }
            ],
        }
    ]


MAX_FEEDBACK_VALUE_CHARS = 2000
"""Slack's limit on a feedback button's value (docs.slack.dev, feedback-buttons-element):
a longer one was not sent by Slack for our buttons."""
_FEEDBACK_VALUE = re.compile(r"(up|down):([UW][A-Z0-9]{1,30}):(\d{1,12}\.\d{1,9})")
"""``up|down:{asker}:{answers_ts}``: a Slack user id and a message ts, nothing else (no
control characters, no ``nan``)."""


def parse_feedback(value: str) -> tuple[bool, str, str] | None:
    """``(positive, asker, answers_ts)`` from a feedback button's value, None if malformed:
    longer than :data:`MAX_FEEDBACK_VALUE_CHARS`, or not exactly the shape
    :func:`feedback_blocks` writes (a user id, a Slack ts; control characters refused)."""
    if len(value) > MAX_FEEDBACK_VALUE_CHARS:
        return None
    found = _FEEDBACK_VALUE.fullmatch(value)
    if found is None:
        return None
    sign, asker, answers_ts = found.groups()
    return sign == "up", asker, answers_ts
