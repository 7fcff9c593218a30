"""Memories worth cleaning up, and a fake-Claude responder that plans like a careful model
(the idea of ``oracle`` in ``tests/core/memory/test_cleanup.py``), for the chat cleanup tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from core.store.seams import Store
from core.types import NewMemory
from tests.fakes.anthropic_server import request_kind

DARK = (
    "The user prefers dark mode in their editor.",
    "The user likes dark mode in the editor.",
    "The user uses a dark theme in the editor.",  # added with /remember
)
MERGED = "The user prefers dark mode in every code editor."
OLD_HOME, NEW_HOME = "The user lives in Paris.", "The user lives in Berlin."
KEPT = "The user has a cat named Miso."
REMINDER = "The user asked to be reminded about meeting number {} today at noon."


async def seed(store: Store, user_key: str) -> None:
    """Six memories: three dark-mode rephrasings (the last one from /remember), an old and a
    new home, and a cat. A careful plan merges the three and supersedes the old home."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    memories = [
        NewMemory(text=DARK[0], kind="preference", source="reflection", created_at=base),
        NewMemory(text=DARK[1], kind="preference", source="reflection", created_at=base),
        NewMemory(text=DARK[2], kind="preference", source="remember", created_at=base),
        NewMemory(text=OLD_HOME, source="reflection", created_at=base),
        NewMemory(text=NEW_HOME, source="reflection", created_at=base + timedelta(days=30)),
        NewMemory(text=KEPT, source="reflection", created_at=base),
    ]
    await store.add_many(user_key=user_key, memories=memories, dedupe=None)


async def seed_reminders(store: Store, user_key: str, count: int) -> None:
    """``count`` one-off reminders, each of which a careful plan retires."""
    memories = [NewMemory(text=REMINDER.format(i), source="reflection") for i in range(count)]
    await store.add_many(user_key=user_key, memories=memories, dedupe=None)


def plan_op(
    name: str, ids: list[int], *, user_added: list[int] | None = None, **fields: Any
) -> dict[str, Any]:
    """One operation of a cleanup plan as the model writes it (``fields`` override)."""
    return {
        "op": name,
        "ids": ids,
        "newer_id": 0,
        "text": "",
        "kind": "fact",
        "category": "general",
        "user_added": user_added or [],
        "reason": "tidy",
    } | fields


def prompt_rows(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The memory rows of a cleanup request (one JSON object a line)."""
    prompt = body["messages"][0]["content"]
    text = prompt if isinstance(prompt, str) else prompt[0]["text"]
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def planner(body: dict[str, Any]) -> str:
    """Cleanup plans: merge the dark-mode memories (listing /remember ones in ``user_added``),
    supersede the old home by the new one, retire reminders. Chat requests get a short text."""
    if request_kind(body) != "extract":
        return "Noted."
    rows = prompt_rows(body)
    ops: list[dict[str, Any]] = []

    def op(name: str, ids: list[int], **fields: Any) -> dict[str, Any]:
        mine = [r["id"] for r in rows if r["id"] in ids and r["user_added"]]
        return plan_op(name, ids, user_added=mine, **fields)

    dark = [r["id"] for r in rows if r["text"] in DARK]
    if len(dark) >= 2:
        ops.append(op("merge", dark, text=MERGED, kind="preference", category="tools"))
    ids = {r["text"]: r["id"] for r in rows}
    if OLD_HOME in ids and NEW_HOME in ids:
        ops.append(op("supersede", [ids[OLD_HOME]], newer_id=ids[NEW_HOME], reason="moved"))
    ops += [op("retire", [r["id"]], reason="one-off") for r in rows if "reminded" in r["text"]]
    return json.dumps({"operations": ops})
