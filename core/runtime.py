"""The composition root's shared part: open the store, the Claude client, the reflector and
the turn loop from settings, and close them in order. Adapters use :func:`open_runtime`::

    async with open_runtime(settings, db_url=url) as rt:
        async for delta in rt.loop.answer(message): ...
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.chat.loop import TurnLoop
from core.errors import ConfigError, SelfMindError
from core.memory.cleanup import Cleaner
from core.memory.cleanup_review import CleanupReviews
from core.memory.recall import BM25Recaller, Recaller
from core.memory.reflection import Reflector
from core.memory.service import MemoryService
from core.metrics import Metrics, Readiness
from core.model.claude import ChatModel, ClaudeChatModel
from core.settings import Settings
from core.store.seams import Store

if TYPE_CHECKING:
    from core.health import HealthServer

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Long-lived resources of one bot process. ``loop`` is None without an API key.

    ``readiness``: adapters report their platform connection on it (``/healthz``);
    ``metrics``: recording a no-op unless ``SELFMIND_METRICS_PORT`` is set; ``health``: the
    ``/healthz`` + ``/metrics`` server when ``open_runtime(serve_health=True)`` started one.
    """

    settings: Settings
    store: Store
    service: MemoryService
    model: ChatModel | None
    reflector: Reflector | None
    loop: TurnLoop | None
    cleaner: Cleaner | None = None
    metrics: Metrics = field(default_factory=Metrics)
    readiness: Readiness = field(default_factory=Readiness)
    health: HealthServer | None = None

    def cleanup_reviews(self) -> CleanupReviews:
        """The cleanup plans shown in chats, over this runtime's store, cleaner and caps."""
        return CleanupReviews(
            store=self.store,
            cleaner=self.cleaner,
            controls=self.loop.controls if self.loop is not None else None,
        )


async def scheduled_cleanups(rt: Runtime) -> None:
    """Every ``cleanup_interval_hours``, clean up each user with enough memories (applied as
    undoable changes; see ``selfmind memories history``)."""
    assert rt.cleaner is not None
    s, cleaner = rt.settings, rt.cleaner
    while True:
        await asyncio.sleep(s.cleanup_interval_hours * 3600)
        for user_key in await rt.store.users_with_memories(at_least=s.cleanup_min_memories):
            try:
                run = await cleaner.apply(await cleaner.plan(user_key=user_key))
            except SelfMindError as exc:
                logger.warning("scheduled cleanup failed: user=%s error=%s", user_key, exc)
                continue
            if run.applied:
                logger.info(
                    "scheduled cleanup user=%s change=%s %d -> %s memories",
                    user_key,
                    run.applied.change_id,
                    run.before,
                    run.after,
                )


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    db_url: str,
    require_model: bool = False,
    start: bool = True,
    before_start: Callable[[Runtime], Awaitable[None]] | None = None,
    serve_health: bool = False,
) -> AsyncIterator[Runtime]:
    """Open everything; on exit drain reflections (bounded by ``shutdown_timeout_s``) and close.

    Without ``ANTHROPIC_API_KEY`` the runtime has no model (memory commands still work);
    with ``require_model`` that is a ``ConfigError`` naming the variable. ``before_start``
    runs after the store opens and before start-up work (resuming reflections), e.g. to find
    messages a crash left unanswered. With ``serve_health`` (the bot modes) and
    ``SELFMIND_METRICS_PORT`` set, ``/healthz`` and ``/metrics`` are served until exit
    (``ConfigError`` naming the variable when the port cannot be listened on).
    """
    metrics = Metrics.create() if settings.metrics_port is not None else Metrics()
    readiness = Readiness()
    store = await open_store(db_url, settings)
    readiness.store_opened()
    model: ClaudeChatModel | None = None
    health: HealthServer | None = None
    try:
        if serve_health and settings.metrics_port is not None:
            from core.health import HealthServer  # aiohttp: only the bot modes need it

            health = await HealthServer.start(
                host=settings.metrics_host,
                port=settings.metrics_port,
                readiness=readiness,
                metrics=metrics,
            )
        recaller = open_recaller(store, settings)
        service = MemoryService(
            store, dedupe_threshold=settings.dedupe_threshold, metrics=metrics, recaller=recaller
        )
        reflector = loop = cleaner = None
        if settings.anthropic_api_key is not None or require_model:
            model = ClaudeChatModel.from_settings(settings, metrics=metrics)
            reflector = Reflector(
                store=store,
                model=model,
                deduper=service.deduper,
                related_k=settings.reflection_related_k,
                max_attempts=settings.reflection_max_attempts,
                model_name=settings.reflection_model,
                metrics=metrics,
                recaller=recaller,
            )
            loop = TurnLoop(
                store=store,
                model=model,
                reflector=reflector,
                settings=settings,
                metrics=metrics,
                recaller=recaller,
            )
            cleaner = Cleaner.from_settings(settings, store=store, model=model)
        metrics.watch(
            readiness=readiness,
            queue_depth=(lambda: reflector.pending) if reflector is not None else None,
        )
        rt = Runtime(
            settings, store, service, model, reflector, loop, cleaner, metrics, readiness, health
        )
        if before_start is not None:
            await before_start(rt)
        if start and loop is not None:
            await loop.start()
        scheduler = None
        if start and cleaner is not None and settings.cleanup_interval_hours > 0:
            scheduler = asyncio.create_task(scheduled_cleanups(rt), name="cleanup-scheduler")
        try:
            yield rt
        finally:
            if scheduler is not None:
                scheduler.cancel()
                await asyncio.gather(scheduler, return_exceptions=True)
            if rt.loop is not None:
                await rt.loop.shutdown()
    finally:
        readiness.store_closed()
        if health is not None:
            await health.close()
        if model is not None:
            await model.aclose()
        await store.close()


async def open_store(url: str, settings: Settings | None = None) -> Store:
    """Open (creating and migrating) the store named by a ``sqlite:///`` or
    ``postgresql://`` URL (a pool of ``settings.db_pool_size`` connections).

    Raises ``ConfigError`` for other schemes or, with ``settings.recall == "hybrid"``, a
    missing semantic extra (checked before anything is opened; recall itself is
    :func:`open_recaller`'s), ``StoreError`` when the file or server cannot be opened.
    """
    if settings is not None and settings.recall == "hybrid":
        from core.memory.embeddings import load_embedder

        load_embedder(settings.embedding_model_dir)  # cheap: checks, loads no model
    store: Store
    if url.startswith("sqlite:///"):
        from core.store.sqlite.store import SQLiteStore

        store = await SQLiteStore.open(
            url.removeprefix("sqlite:///"),
            synchronous=settings.sqlite_synchronous if settings is not None else "full",
        )
    elif url.startswith(("postgresql://", "postgres://")):
        from core.store.postgres.store import PostgresStore

        pool_size = settings.db_pool_size if settings is not None else 10
        store = await PostgresStore.open(url, pool_size=pool_size)
    else:
        raise ConfigError(f"SELFMIND_DB: no store for {url.split('://', 1)[0]!r} URLs")
    return store


def open_recaller(store: Store, settings: Settings | None = None) -> Recaller:
    """The recall the settings ask for over ``store``: BM25 (the default), or with
    ``settings.recall == "hybrid"`` BM25 fused with embeddings (:mod:`core.memory.hybrid`;
    ``ConfigError`` when the semantic extra is missing)."""
    if settings is None or settings.recall != "hybrid":
        return BM25Recaller(store)
    from core.memory.embeddings import load_embedder
    from core.memory.hybrid import HybridRecaller

    return HybridRecaller(store, load_embedder(settings.embedding_model_dir))
