"""The composition root's shared part: open the store, the Claude client, the reflector and
the turn loop from settings, and close them in order. Adapters use :func:`open_runtime`::

    async with open_runtime(settings, db_url=url) as rt:
        async for delta in rt.loop.answer(message): ...
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from core.llm import ChatModel, ClaudeChatModel
from core.loop import TurnLoop
from core.reflection import Reflector
from core.service import MemoryService
from core.settings import Settings
from core.store import Store, open_store

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Long-lived resources of one bot process. ``loop`` is None without an API key."""

    settings: Settings
    store: Store
    service: MemoryService
    model: ChatModel | None
    reflector: Reflector | None
    loop: TurnLoop | None


@asynccontextmanager
async def open_runtime(
    settings: Settings, *, db_url: str, require_model: bool = False, start: bool = True
) -> AsyncIterator[Runtime]:
    """Open everything; on exit drain reflections (bounded by ``shutdown_timeout_s``) and close.

    Without ``ANTHROPIC_API_KEY`` the runtime has no model (memory commands still work);
    with ``require_model`` that is a ``ConfigError`` naming the variable.
    """
    store = await open_store(db_url)
    model: ClaudeChatModel | None = None
    try:
        service = MemoryService(store, dedupe_threshold=settings.dedupe_threshold)
        reflector = loop = None
        if settings.anthropic_api_key is not None or require_model:
            model = ClaudeChatModel.from_settings(settings)
            reflector = Reflector(
                store=store,
                model=model,
                deduper=service.deduper,
                related_k=settings.reflection_related_k,
                max_attempts=settings.reflection_max_attempts,
                model_name=settings.reflection_model,
            )
            loop = TurnLoop(store=store, model=model, reflector=reflector, settings=settings)
            if start:
                await loop.start()
        rt = Runtime(settings, store, service, model, reflector, loop)
        try:
            yield rt
        finally:
            if rt.loop is not None:
                await rt.loop.shutdown()
    finally:
        if model is not None:
            await model.aclose()
        await store.close()
