"""Shared fixtures: real stores, the memory service over them.

The ``store`` and ``db_url`` fixtures (and ``service`` over ``store``) run each test against
every backend: SQLite always (a file under ``tmp_path``), PostgreSQL when
``SELFMIND_TEST_DATABASE_URL`` names a server (else those variants are skipped, with the
reason shown). Each test run creates its own database on that server (random name), empties
it before each test and drops it at the end. A server that is named but unreachable fails the
run instead of skipping it.

Tests about SQLite itself (file bytes, PRAGMAs, SIGKILL of a SQLite writer) take
``sqlite_store`` / ``db_path``, or carry ``@pytest.mark.sqlite_only`` to keep ``store`` and
``db_url`` on SQLite.

A new SQLite store opened in a test's process (any ``SQLiteStore.open`` of a file that does not
exist yet: the fixtures, ``open_store``, a command run in process) starts as a copy of a
template migrated once per run (per xdist worker), not by running every migration (0.2-0.3 s
a store); its schema is the same, only ``store.migrated`` is empty. A test that patches the
migration list (an old store) gets it run for real; a test about migrating a new file carries
``@pytest.mark.real_migrations``. Processes a test starts (``selfmind``
commands) migrate for real.

Parallel runs (``pytest -n 2 --dist loadgroup``, scripts/check): the tests that run bots,
terminals and writers as processes, and those that load the embedding model, are in
:data:`WORKER_GROUPS`, each group on one worker; every worker has its own PostgreSQL
database, SQLite template and embedding model.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest

from core.memory.service import MemoryService
from core.runtime import open_store
from core.store.seams import Store
from core.store.sqlite import base as sqlite_base
from core.store.sqlite.base import MIGRATIONS, SQLiteBase
from core.store.sqlite.store import SQLiteStore

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCOMO = REPO_ROOT.parent / "shared" / "data" / "locomo"
PG_ENV = "SELFMIND_TEST_DATABASE_URL"
T = TypeVar("T")


def pytest_configure(config: pytest.Config) -> None:
    # Settings are also read from the user's config directory and SELFMIND_ENV_FILE
    # (core.settings): a developer's own must not reach the tests (nor their subprocesses).
    import tempfile

    config_home = tempfile.mkdtemp(prefix="selfmind-test-config-")
    os.environ["XDG_CONFIG_HOME"] = config_home
    config.add_cleanup(lambda: shutil.rmtree(config_home, ignore_errors=True))
    os.environ.pop("SELFMIND_ENV_FILE", None)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # xdist's workers get COLUMNS=80 LINES=24: processes on a pseudo-terminal would
        # wrap at 80 columns instead of the terminal's width, as in a serial run.
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
    config.addinivalue_line(
        "markers", "sqlite_only: run the store/db_url variants of this test on SQLite only"
    )
    config.addinivalue_line(
        "markers",
        "real_migrations: new SQLite stores run every migration (no migrated template copy)",
    )


WORKER_GROUPS: dict[str, tuple[str, ...]] = {
    "terminal crashes": ("tests/bots/terminal/test_crash_recovery.py",),
    "discord processes": (
        "tests/bots/discord_bot/test_discord_fake_process.py",
        "tests/bots/discord_bot/test_discord_recovery.py",
        "tests/bots/discord_bot/test_reconnect_discord.py",
        "tests/bots/discord_bot/test_reconnect_discord_process.py",
        "tests/bots/discord_bot/test_revoked_token_discord.py",
        "tests/core/store/test_postgres_replicas.py",
    ),
    "slack crashes": (
        "tests/bots/slack_bot/test_slack_process.py",
        "tests/bots/slack_bot/test_slack_socket_crash.py",
        "tests/bots/slack_bot/test_slack_recovery_places.py",
        "tests/bots/slack_bot/test_slack_stream_recovery.py",
    ),
    "terminals": (
        "tests/bots/terminal/",
        "tests/bots/test_eval_cli.py",
    ),
    "slack connections": (
        "tests/bots/slack_bot/test_reconnect_slack.py",
        "tests/bots/slack_bot/test_revoked_token_slack.py",
        "tests/core/store/test_durability.py",
    ),
    "embedding model": (
        "tests/core/memory/test_embeddings.py",
        "tests/core/memory/test_semantic.py",
    ),
}
"""Tests that run on one worker, one at a time, in a parallel run (``--dist loadgroup``):
those that run bots, terminals or writers as processes against deadlines, in five groups;
and those that share the sentence-transformers model a worker loads once
(:func:`embedding_models_once`). xdist hands the groups out first, in this order (the
longest first: a group is one worker's thread, so one handed out late would end the run
alone), then :data:`LONG_TESTS`, then the rest as the workers come free. A test is in the
first group one of whose paths begins its id (``tests/bots/terminal/`` after the crash
tests' file)."""

LONG_TESTS: tuple[str, ...] = (
    "tests/core/test_settings.py::test_env_example_copied_as_is_runs_every_command",
    "tests/bench/test_replay_slice.py::",
    "tests/bots/discord_bot/test_discord_memory.py::test_preference_recalled_after_restart",
    "tests/bench/test_team_bench.py::",
)
"""Tests in no group that take 10-30 s (processes, a LoCoMo slice): handed out right after
the groups, so that none of them starts last and runs on while the other workers wait."""


def worker_group(nodeid: str) -> str | None:
    """The :data:`WORKER_GROUPS` group of the test ``nodeid``, or None."""
    return next((name for name, paths in WORKER_GROUPS.items() if nodeid.startswith(paths)), None)


def handout_rank(scope: str) -> int | None:
    """Where the unit ``scope`` (a group's name or a test's id) is handed out among the
    first: the groups in :data:`WORKER_GROUPS`' order, then :data:`LONG_TESTS`; None for
    the others (after them, in collection order)."""
    if scope in WORKER_GROUPS:
        return list(WORKER_GROUPS).index(scope)
    rank = next((i for i, prefix in enumerate(LONG_TESTS) if scope.startswith(prefix)), None)
    return None if rank is None else len(WORKER_GROUPS) + rank


@pytest.hookimpl(optionalhook=True)  # a run without pytest-xdist (-p no:xdist) has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup`` over :data:`WORKER_GROUPS` (pytest-xdist's ``xdist_group`` marker
    cannot do it under pytest 9: xdist 3.8 names a test's group by rewriting
    ``item._nodeid``, which pytest 9 no longer reads, so every test ran wherever it fell),
    the units handed out in :func:`handout_rank`'s order (xdist's own: the units with the
    most tests first, which put a short group of many tests before a long one)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling
    from xdist.workermanage import WorkerController

    class ProcessGroupScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid) or nodeid

        def _assign_work_unit(self, node: WorkerController) -> None:
            if not self.ordered:  # the first hand-out: the whole queue is known
                self.ordered = True
                ranked = {s: r for s in self.workqueue if (r := handout_rank(s)) is not None}
                for scope in sorted(ranked, key=ranked.__getitem__, reverse=True):
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return ProcessGroupScheduling(config, log)  # type: ignore[arg-type]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    backends: list[object] = ["sqlite"]
    if metafunc.definition.get_closest_marker("sqlite_only") is None:
        reason = f"PostgreSQL: set {PG_ENV} (e.g. postgresql://postgres@127.0.0.1:5432/test)"
        marks = [] if os.environ.get(PG_ENV) else [pytest.mark.skip(reason=reason)]
        backends.append(pytest.param("postgres", marks=marks))
    metafunc.parametrize("backend", backends)


def run_sync(coro: Awaitable[T]) -> T:
    """Run ``coro`` to completion on a fresh event loop in another thread (usable from sync
    fixtures while a test's loop exists)."""

    async def wrap() -> T:
        return await coro

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, wrap()).result()


def database_url(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` on the same server."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(os.environ[PG_ENV], timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def fresh_pg_database(migrated: bool = True) -> Iterator[str]:
    """A new, empty PostgreSQL database on the test server (migrated unless told not to),
    dropped afterwards; yields its URL. Fails the test when the server is unreachable."""
    if not os.environ.get(PG_ENV):
        pytest.skip(f"PostgreSQL: set {PG_ENV}")
    name = f"selfmind_test_{secrets.token_hex(5)}"
    try:
        run_sync(_admin(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # connection refused, bad credentials ...
        pytest.fail(f"{PG_ENV} is set but the server cannot be used: {type(exc).__name__}: {exc}")
    url = database_url(os.environ[PG_ENV], name)
    try:
        if migrated:
            run_sync(_migrate(url))
        yield url
    finally:
        # In the background: a DROP DATABASE waits for a checkpoint, seconds on a busy disk.
        drop = _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        _DROPPING.append(_DROPS.submit(asyncio.run, drop))


_DROPS = ThreadPoolExecutor(1, thread_name_prefix="drop-database")
_DROPPING: list[Future[None]] = []
"""The databases :func:`fresh_pg_database` is dropping; the run waits for each at its end."""


def pytest_sessionfinish(session: pytest.Session) -> None:
    for dropping in _DROPPING:
        dropping.result()  # a database that could not be dropped fails the run


async def _migrate(url: str) -> None:
    store = await open_store(url)
    await store.close()


_TABLES_AND_REFERENCES = """
SELECT c.relname, coalesce(array_agg(f.conrelid::regclass::text)
                           FILTER (WHERE f.conrelid <> c.oid), '{}')
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
LEFT JOIN pg_constraint f ON f.confrelid = c.oid AND f.contype = 'f'
WHERE c.relkind IN ('r', 'p') AND c.relname <> 'schema_migrations'
GROUP BY c.relname
"""
"""Every table of the store but its migrations record, with the tables whose foreign keys
reference it."""

_RESTART_SEQUENCES = """
SELECT setval(s.seqrelid, s.seqstart, false)
FROM pg_sequence s JOIN pg_depend d ON d.objid = s.seqrelid AND d.deptype IN ('a', 'i')
WHERE d.refobjid = ANY($1::regclass[])
"""
"""The identities (serial and identity columns) of those tables back to their start, as
``TRUNCATE ... RESTART IDENTITY`` would."""


async def _truncate(url: str) -> None:
    """Empty every table of the store at ``url`` (its migrations record kept) and restart its
    identities. ``DELETE``, referencing tables first, rather than ``TRUNCATE``: on the few rows
    a test leaves it takes milliseconds where ``TRUNCATE`` of every table takes 0.1-0.9 s
    (a new file for each table, synced at commit)."""
    from graphlib import TopologicalSorter

    import asyncpg

    conn = await asyncpg.connect(url, timeout=10)
    try:
        await conn.execute("SET lock_timeout = '10s'")
        # A table after the tables that reference it, so no foreign key stops a DELETE.
        references = {name: set(refs) for name, refs in await conn.fetch(_TABLES_AND_REFERENCES)}
        tables = list(TopologicalSorter(references).static_order())
        async with conn.transaction():
            await conn.execute("".join(f'DELETE FROM "{table}";' for table in tables))
            await conn.execute(_RESTART_SEQUENCES, tables)
    finally:
        await conn.close()


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Put the root logger back as each test found it: a command run in process
    (``configure_logging``) replaces its handlers with one bound to that test's captured
    stderr, which is closed once the test ends; later records would then print a
    "Logging error" wherever stderr goes."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store migrated once for this run (per xdist worker), closed: new stores in
    tests start as a copy of it (:func:`_new_sqlite_stores_from_template`)."""
    path = tmp_path_factory.mktemp("template") / "migrated.db"

    async def create() -> None:
        store = await _ORIGINAL_OPEN(SQLiteStore, str(path))
        await store.close()

    run_sync(create())
    return path


_ORIGINAL_OPEN = SQLiteBase.open.__func__


@pytest.fixture(autouse=True)
def _new_sqlite_stores_from_template(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SQLiteStore.open`` of a file that does not exist copies the migrated template there
    first (0.01 s instead of 0.2-0.3 s of migrations); off under ``real_migrations``."""
    if request.node.get_closest_marker("real_migrations") is not None:
        return
    template = str(request.getfixturevalue("sqlite_template"))

    async def open_from_template(
        cls: type[SQLiteBase], path: str, *args: object, **kwargs: object
    ) -> SQLiteBase:
        db = Path(path).expanduser()
        # A test that patched the migrations (an old store's list) gets them run for real.
        if path != ":memory:" and not db.exists() and sqlite_base.MIGRATIONS == MIGRATIONS:
            try:
                if not db.parent.exists():  # as the store makes it: 0700
                    db.parent.mkdir(parents=True)
                    db.parent.chmod(0o700)
                shutil.copy(template, db)  # its bytes and its mode (0600, as a new store's)
            except OSError:
                pass  # the store's own open says what is wrong with the path
        store: SQLiteBase = await _ORIGINAL_OPEN(cls, path, *args, **kwargs)
        return store

    monkeypatch.setattr(SQLiteBase, "open", classmethod(open_from_template))


_MODELS: dict[str, object] = {}
"""This run's (this worker's) sentence-transformers models, by directory."""
_PROBES: dict[tuple[str, int], object] = {}
"""This run's answers of the bfloat16 probes, by probe and model."""


@pytest.fixture
def embedding_models_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each sentence-transformers model loaded once per run (per xdist worker) and its
    bfloat16 probes (``bf16_keeps_vectors``, ``bf16_speedup`` with its default rounds)
    measured once, as in one long-lived process: loading the model and choosing its precision
    for real takes 5-40 s, and every embedder a test made did it again. A test that patches a
    probe gets its own. For the tests that load a model in their own process; a no-op when
    the semantic extra is not installed."""
    import importlib.util

    if importlib.util.find_spec("sentence_transformers") is None:
        return
    import sentence_transformers

    import core.memory.embeddings as embeddings

    load = sentence_transformers.SentenceTransformer

    def loaded_once(model_dir: str, *args: object, **kwargs: object) -> object:
        if (args, kwargs) != ((), {"device": "cpu"}):
            return load(model_dir, *args, **kwargs)
        if model_dir not in _MODELS:
            _MODELS[model_dir] = load(model_dir, device="cpu")
        return _MODELS[model_dir]

    def measured_once(name: str, probe: Callable[..., T]) -> Callable[..., T]:
        def once(model: object, **kwargs: object) -> T:
            key = (name, id(model))
            if kwargs or not any(model is m for m in _MODELS.values()):  # the test's own
                return probe(model, **kwargs)
            if key not in _PROBES:
                _PROBES[key] = probe(model)
            return _PROBES[key]  # type: ignore[return-value]

        return once

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", loaded_once)
    for name in ("bf16_keeps_vectors", "bf16_speedup"):
        monkeypatch.setattr(embeddings, name, measured_once(name, getattr(embeddings, name)))


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """This run's PostgreSQL database (migrated), dropped at the end of the run."""
    with fresh_pg_database() as url:
        yield url


@pytest.fixture
def backend() -> str:
    return "sqlite"  # parametrised by pytest_generate_tests


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    """This run's PostgreSQL database, emptied for the test (skipped without a server)."""
    if not os.environ.get(PG_ENV):
        pytest.skip(f"PostgreSQL: set {PG_ENV} (e.g. postgresql://postgres@127.0.0.1:5432/test)")
    url: str = request.getfixturevalue("pg_database")
    run_sync(_truncate(url))
    return url


@pytest.fixture
def db_url(backend: str, db_path: Path, request: pytest.FixtureRequest) -> str:
    """The test's database as a URL: a SQLite file, or this run's PostgreSQL database
    emptied for the test."""
    if backend == "sqlite":
        return f"sqlite:///{db_path}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = await open_store(db_url)
    yield s
    await s.close()


@pytest.fixture
async def sqlite_store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    s = await SQLiteStore.open(str(db_path))
    yield s
    await s.close()


@pytest.fixture
def service(store: Store) -> MemoryService:
    return MemoryService(store, dedupe_threshold=0.7)


def locomo_or_skip() -> Path:
    """The shared LoCoMo folder (or ``SELFMIND_LOCOMO_DIR``, as for a worktree elsewhere),
    or skip the test when neither has it."""
    for folder in (LOCOMO, Path(os.environ.get("SELFMIND_LOCOMO_DIR", "/nonexistent"))):
        if any(folder.glob("conv-*.json")):
            return folder
    pytest.skip(f"LoCoMo data not found at {LOCOMO} (or SELFMIND_LOCOMO_DIR)")
