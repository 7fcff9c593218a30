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
