"""The composition root's shared part: open the store, the Claude client, the reflector and
the turn loop from settings, and close them in order. Two runtimes, nothing optional in
either: :class:`MemoryRuntime` (store and memory service: memory commands, the CLI) and
:class:`ChatRuntime` (also the model, reflector, turn loop, cleaner and cleanup reviews, each
built once by :func:`chat_runtime`). Adapters use :func:`open_runtime`::

    async with open_runtime(settings, db_url=url, require_model=True) as rt:
        async for delta in rt.loop.answer(message): ...
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, overload

from core.errors import SelfMindError
from core.memory.service import MemoryService
from core.metrics import Metrics, Readiness
from core.store import database
from core.store.channels import channel_keys

if TYPE_CHECKING:
    # The chat side (the Anthropic SDK, files, numpy) is imported where a runtime with
    # Claude is built: memory commands, `selfmind users` and `db` never load it
    # (tests/bots/test_cli_imports.py; bench/startup.py measures the difference).
    from core.chat.loop import TurnLoop
    from core.health import HealthServer
    from core.memory.cleanup import Cleaner
    from core.memory.cleanup_review import CleanupReviews
    from core.memory.consolidation import Consolidator
    from core.memory.hybrid import HybridRecaller
    from core.memory.recall import Recaller
    from core.memory.reflection import LearnedCallback, Reflector
    from core.model.claude import ChatModel, ClaudeChatModel
    from core.settings import Settings
    from core.store.seams import Store

logger = logging.getLogger(__name__)


@dataclass
class MemoryRuntime:
    """Long-lived resources of a process without Claude (memory commands, the CLI, a
    terminal without ``ANTHROPIC_API_KEY``): the store and the memory service.

    ``readiness``: adapters report their platform connection on it (``/healthz``);
    ``metrics``: recording a no-op unless ``SELFMIND_METRICS_PORT`` is set; ``health``: the
    ``/healthz`` + ``/metrics`` server when ``open_runtime(serve_health=True)`` started one.
    """

    settings: Settings
    store: Store
    service: MemoryService
    metrics: Metrics
    readiness: Readiness
    health: HealthServer | None


@dataclass
class ChatRuntime(MemoryRuntime):
    """A runtime with Claude: the model, the reflector, the turn loop, the cleaner and the
    cleanup reviews, none of them optional. :meth:`start` starts the turn loop's start-up
    work, the embeddings backfill (:func:`backfill`), the cleanup scheduler
    (``cleanup_interval_hours > 0``) and consolidation while quiet (``consolidation``, off by
    default: :mod:`core.memory.consolidation`), once; the runtime stops them on exit."""

    model: ChatModel
    reflector: Reflector
    loop: TurnLoop
    cleaner: Cleaner
    reviews: CleanupReviews
    _started: bool = field(default=False, init=False, repr=False)
    _scheduler: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _consolidation: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _backfill: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    async def start(self, *, on_learned: LearnedCallback | None = None) -> None:
        """Resume pending reflections (:meth:`TurnLoop.start`), reporting what each learns
        to ``on_learned`` (the adapter's note or Home refresh), and start the cleanup
        scheduler. Adapters open the runtime with ``start=False``, build themselves on it,
        then call this with their handler; a second call does nothing."""
        if self._started:
            return
        self._started = True
        await self.loop.start(on_learned=on_learned)
        from core.memory.hybrid import HybridRecaller

        if isinstance(self.service.recaller, HybridRecaller):
            self._backfill = asyncio.create_task(
                backfill(self.service.recaller), name="embeddings-backfill"
            )
        if self.settings.cleanup_interval_hours > 0:
            self._scheduler = asyncio.create_task(
                scheduled_cleanups(self), name="cleanup-scheduler"
            )
        if self.settings.consolidation:  # off by default: then no task at all
            self._consolidation = asyncio.create_task(
                consolidator(self).serve(), name="consolidation"
            )

    async def stop(self) -> None:
        """Stop the scheduler and drain the turn loop (bounded by ``shutdown_timeout_s``)."""
        for task in (self._scheduler, self._backfill, self._consolidation):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.loop.shutdown()


Runtime = ChatRuntime
"""The runtime of a chat adapter (Slack, Discord)."""


BACKFILL_LIMIT = 200_000
"""At start, at most this many memories stored before (or by another process) are embedded
in the background; recall embeds any other it needs when it first needs them."""


async def backfill(recaller: HybridRecaller) -> None:
    """Embed memories that have no vector from the recaller's model yet, up to
    :data:`BACKFILL_LIMIT` (a failure is logged: recall still embeds what it needs)."""
    try:
        done = await recaller.reindex(limit=BACKFILL_LIMIT)
    except SelfMindError as exc:
        logger.warning("embedding backfill failed: %s", exc)
        return
    if done:
        logger.info("embedded %d memories stored before (%s)", done, recaller.embedder.name)


async def scheduled_cleanups(rt: ChatRuntime) -> None:
    """Every ``cleanup_interval_hours``, clean up each user with enough memories (applied as
    undoable changes; see ``selfmind memories history``)."""
    s, cleaner = rt.settings, rt.cleaner
    while True:
        await asyncio.sleep(s.cleanup_interval_hours * 3600)
        channels = await channel_keys(rt.store)  # a channel's entries are not a user's
        for user_key in await rt.store.users_with_memories(at_least=s.cleanup_min_memories):
            if user_key in channels:
                continue
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


def consolidator(rt: ChatRuntime) -> Consolidator:
    """The runtime's :class:`core.memory.consolidation.Consolidator`, from its settings."""
    from core.memory.consolidation import Consolidator, Window

    s = rt.settings
    return Consolidator(
        store=rt.store,
        cleaner=rt.cleaner,
        enabled=s.consolidation,
        window=Window.parse(s.consolidation_window),
        daily_tokens=s.consolidation_daily_tokens,
        min_memories=s.cleanup_min_memories,
        metrics=rt.metrics,
    )


def chat_runtime(base: MemoryRuntime, model: ChatModel) -> ChatRuntime:
    """The chat collaborators over ``base``'s store, each built once from its settings."""
    from core.chat.loop import TurnLoop
    from core.memory.cleanup import Cleaner
    from core.memory.cleanup_review import CleanupReviews
    from core.memory.reflection import Reflector

    settings, store, metrics = base.settings, base.store, base.metrics
    reflector = Reflector(
        store=store,
        model=model,
        deduper=base.service.deduper,
        related_k=settings.reflection_related_k,
        max_attempts=settings.reflection_max_attempts,
        model_name=settings.reflection_model,
        metrics=metrics,
        recaller=base.service.recaller,
    )
    loop = TurnLoop(
        store=store,
        model=model,
        reflector=reflector,
        settings=settings,
        metrics=metrics,
        recaller=base.service.recaller,
    )
    cleaner = Cleaner.from_settings(settings, store=store, model=model)
    reviews = CleanupReviews(store=store, cleaner=cleaner, controls=loop.controls)
    return ChatRuntime(
        settings=settings,
        store=store,
        service=base.service,
        metrics=metrics,
        readiness=base.readiness,
        health=base.health,
        model=model,
        reflector=reflector,
        loop=loop,
        cleaner=cleaner,
        reviews=reviews,
    )


@overload
def open_runtime(
    settings: Settings,
    *,
    db_url: str,
    require_model: Literal[True],
    start: bool = True,
    before_start: Callable[[ChatRuntime], Awaitable[None]] | None = None,
    serve_health: bool = False,
    migrate: bool = False,
) -> AbstractAsyncContextManager[ChatRuntime]: ...


@overload
def open_runtime(
    settings: Settings,
    *,
    db_url: str,
    require_model: bool = False,
    start: bool = True,
    before_start: Callable[[ChatRuntime], Awaitable[None]] | None = None,
    serve_health: bool = False,
    migrate: bool = False,
) -> AbstractAsyncContextManager[MemoryRuntime]: ...


def open_runtime(
    settings: Settings,
    *,
    db_url: str,
    require_model: bool = False,
    start: bool = True,
    before_start: Callable[[ChatRuntime], Awaitable[None]] | None = None,
    serve_health: bool = False,
    migrate: bool = False,
) -> AbstractAsyncContextManager[MemoryRuntime]:
    """Open everything; on exit drain reflections (bounded by ``shutdown_timeout_s``) and close.

    Yields a :class:`ChatRuntime` when ``ANTHROPIC_API_KEY`` is set, else a
    :class:`MemoryRuntime` (memory commands still work); with ``require_model`` (typed to
    yield a ``ChatRuntime``) a missing key is a ``ConfigError`` naming the variable.
    ``before_start`` runs after the store opens and before start-up work (resuming
    reflections), e.g. to find messages a crash left unanswered; with ``start=False`` the
    adapter calls :meth:`ChatRuntime.start` itself. With ``serve_health`` (the bot modes) and
    ``SELFMIND_METRICS_PORT`` set, ``/healthz`` and ``/metrics`` are served until exit
    (``ConfigError`` naming the variable when the port cannot be listened on). ``migrate``
    (the bots' start) applies pending migrations (:func:`open_store`).
    """
    return _open_runtime(
        settings,
        db_url=db_url,
        require_model=require_model,
        start=start,
        before_start=before_start,
        serve_health=serve_health,
        migrate=migrate,
    )


@asynccontextmanager
async def _open_runtime(
    settings: Settings,
    *,
    db_url: str,
    require_model: bool,
    start: bool,
    before_start: Callable[[ChatRuntime], Awaitable[None]] | None,
    serve_health: bool,
    migrate: bool,
) -> AsyncIterator[MemoryRuntime]:
    metrics = Metrics.create() if settings.metrics_port is not None else Metrics()
    readiness = Readiness()
    store = await open_store(db_url, settings, migrate=migrate)
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
        base = MemoryRuntime(settings, store, service, metrics, readiness, health)
        if settings.anthropic_api_key is None and not require_model:
            metrics.watch(readiness=readiness, queue_depth=None)
            yield base
            return
        from core.model.claude import ClaudeChatModel

        model = ClaudeChatModel.from_settings(settings, metrics=metrics)
        if require_model:  # the bots: the SDK loads before they connect, not at a first answer
            model.connect()
        rt = chat_runtime(base, model)
        reflector = rt.reflector
        metrics.watch(
            readiness=readiness,
            queue_depth=lambda: reflector.pending,
            recall_drops=lambda: store.recall_records_dropped,
        )
        if before_start is not None:
            await before_start(rt)
        try:
            if start:
                await rt.start()
            freeze_startup_heap()
            yield rt
        finally:
            await rt.stop()
    finally:
        readiness.store_closed()
        if health is not None:
            await health.close()
        if model is not None:
            await model.aclose()
        await store.close()


async def open_store(url: str, settings: Settings | None = None, *, migrate: bool = False) -> Store:
    """Open the store named by a ``sqlite:///`` or ``postgresql://`` URL (a pool of
    ``settings.db_pool_size`` connections; :func:`core.store.database.open_store`). A new
    store is created with the whole schema; a store that is behind is migrated only with
    ``migrate`` (``selfmind db migrate``, the bots' start: each applied migration is logged
    and named in ``store.migrated``).

    Raises ``ConfigError`` for other schemes or, with ``settings.recall == "hybrid"``, a
    missing semantic extra (checked before anything is opened; recall itself is
    :func:`open_recaller`'s), ``StoreError`` when the file or server cannot be opened,
    ``SchemaBehindError`` (without ``migrate``) or ``NewerSchemaError`` when this version may
    not use the store as it is (nothing changed; :mod:`core.store.schema`).
    """
    if settings is not None and settings.recall == "hybrid":
        from core.memory.embeddings import load_embedder

        load_embedder(settings.embedding_model_dir)  # cheap: checks, loads no model
    elif settings is not None and settings.recall == "static":
        from core.memory.static import package_dir

        package_dir()  # cheap: finds the files, loads nothing
    store = await database.open_store(
        database.database(url),
        synchronous=settings.sqlite_synchronous if settings is not None else "full",
        pool_size=settings.db_pool_size if settings is not None else 10,
        migrate=migrate,
    )
    for name in store.migrated:
        logger.info("applied migration %s", name)
    return store


def open_recaller(store: Store, settings: Settings | None = None) -> Recaller:
    """The recall the settings ask for over ``store``: ``static`` (the default, also when
    ``settings`` is None) BM25 fused with static word embeddings and query expansion
    (:mod:`core.memory.static`, numpy only); ``bm25`` BM25 alone; ``hybrid`` BM25 fused with
    MiniLM embeddings (:mod:`core.memory.hybrid`; ``ConfigError`` when the semantic extra
    is missing)."""
    from core.memory.hybrid import HybridRecaller
    from core.memory.recall import BM25Recaller

    if settings is not None and settings.recall == "bm25":
        return BM25Recaller(store)
    if settings is not None and settings.recall == "hybrid":
        from core.memory.embeddings import load_embedder

        return HybridRecaller(store, load_embedder(settings.embedding_model_dir))
    from core.memory.static import StaticEmbedder

    return HybridRecaller(store, StaticEmbedder(), fusion="score", expand=True)


_frozen = False


def freeze_startup_heap() -> None:
    """Move every object alive once a chat runtime is up (imported modules, the SDKs'
    classes, settings, the store's and recall's long-lived state) to the collector's
    permanent generation (:func:`gc.freeze`), once per process. A full collection then no
    longer walks them on every turn: profile plus static recall at 10,000 of 1,000,000
    memories, p95 3.0 against 2.7 ms in one process (``bench/use.py``'s latency part, which
    calls this as the runtime does). Objects are still freed by reference counting; only
    cycles among them would outlive a collection, and what is alive at start-up lives as
    long as the process. (The ``gc`` module's documentation gives ``gc.freeze`` for a
    process about to ``fork()``; the saved traversal is what is used here.)"""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
