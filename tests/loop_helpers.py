"""Building a real turn loop (store, Claude client, reflector) against the fake Anthropic."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.chat.loop import IncomingMessage, TurnLoop
from core.memory.reflection import Reflector
from core.memory.service import MemoryService
from core.model.claude import ClaudeChatModel
from core.runtime import open_store
from core.settings import Settings, load_settings
from core.store.seams import Store
from core.store.sqlite.store import SQLiteStore
from tests.fakes.anthropic_server import FakeAnthropic

API_KEY = "sk-ant-test-key"


@dataclass
class Harness:
    store: Store
    model: ClaudeChatModel
    reflector: Reflector
    loop: TurnLoop
    service: MemoryService
    settings: Settings

    async def say(self, message: IncomingMessage) -> str:
        return "".join([d async for d in self.loop.answer(message)])


def settings_for(fake: FakeAnthropic, db: Path | str, **overrides: Any) -> Settings:
    return load_settings(
        anthropic_api_key=API_KEY,
        anthropic_base_url=fake.base_url,
        db=str(db),
        anthropic_max_retries=overrides.pop("anthropic_max_retries", 2),
        **overrides,
    )


@asynccontextmanager
async def harness(
    fake: FakeAnthropic, db: Path | str, *, start: bool = True, **overrides: Any
) -> AsyncIterator[Harness]:
    """A started turn loop over ``db``: a SQLite file path, or a store URL (``db_url``)."""
    settings = settings_for(fake, db, **overrides)
    store: Store = await SQLiteStore.open(str(db)) if isinstance(db, Path) else await open_store(db)
    model = ClaudeChatModel.from_settings(settings)
    service = MemoryService(store, dedupe_threshold=settings.dedupe_threshold)
    reflector = Reflector(
        store=store,
        model=model,
        deduper=service.deduper,
        related_k=settings.reflection_related_k,
        max_attempts=settings.reflection_max_attempts,
        retry_delay_s=0.0,
        model_name=settings.reflection_model,
    )
    loop = TurnLoop(store=store, model=model, reflector=reflector, settings=settings)
    if start:
        await loop.start()
    try:
        yield Harness(store, model, reflector, loop, service, settings)
    finally:
        await reflector.close()
        await model.aclose()
        await store.close()


def dm(user: str, text: str, **kw: Any) -> IncomingMessage:
    return IncomingMessage(
        user_key=user,
        conversation_key=kw.pop("conversation_key", f"dm:{user}"),
        text=text,
        origin=kw.pop("origin", "private"),
        sent_at=kw.pop("sent_at", datetime(2026, 11, 29, 12, 0, tzinfo=UTC)),
        **kw,
    )


def memories_reply(*items: tuple[str, str, str] | dict[str, Any]) -> dict[str, Any]:
    """A reflection reply in the product's schema."""
    out = []
    for item in items:
        if isinstance(item, dict):
            out.append(item)
        else:
            text, kind, category = item
            out.append({"text": text, "kind": kind, "category": category, "supersedes": []})
    return {"memories": out}


_MEMORY_LINE = re.compile(r'^#\d+(?: \d{4}-\d{2}-\d{2})?(?: \(past\))? (".*")$')


def memory_lines(system_text: str) -> list[str]:
    """The texts of the memory lines (``#12 2026-11-30 "text"``) of the profile and memory
    blocks in ``system_text``, in order."""
    texts = []
    for tag in ("profile", "memories"):
        if f"<{tag}>" not in system_text:
            continue
        inside = system_text.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]
        for line in inside.splitlines():
            match = _MEMORY_LINE.match(line)
            if match:
                texts.append(json.loads(match.group(1)))
    return texts


def memory_text(body: dict[str, Any]) -> str:
    """Every system block of a chat request but the persona: the profile (when there is one)
    and the volatile block, joined."""
    return "\n".join(str(block["text"]) for block in body["system"][1:])
