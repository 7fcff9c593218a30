"""``selfmind channels ...`` and the ``--channel`` side of ``selfmind memories ...``: a
channel's own memory (team memory, :mod:`core.memory.team`) from the command line.

    selfmind channels list [--json]                 each channel seen: key, memory, entries
    selfmind channels memory on|off KEY [--allow U] turn a channel's memory on or off
    selfmind channels undo KEY TOKEN                undo a change (the token it printed)
    selfmind memories remember --channel KEY TEXT   add an entry
    selfmind memories list --channel KEY [--json]   its entries, newest first, who said each
    selfmind memories forget --channel KEY ID       forget one (undoable for 7 days)
    selfmind memories export|import --channel KEY   JSON Lines, as a user's memories

A change takes effect on a running bot's next message in that channel, with no restart:
the bot reads the channel's row and entries on every message (several processes may
share a PostgreSQL store). Changes made here are recorded as made by ``cli``.

Importing this module imports typer and the standard library only (``selfmind --help``
stays light); the store and the core are imported by the commands. The commands are built
by :func:`channels_commands` with the CLI's own runner and store opener (no import of
:mod:`bots.cli` from here).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from core.errors import MemoryInputError
from core.platforms import platform_of_key
from core.rules.text import needs_cleaning
from core.store.channels import channel_keys

if TYPE_CHECKING:
    from core.memory.team import Change, TeamMemory
    from core.settings import Settings
    from core.store.seams import Store
    from core.types import Attribution, ChannelInfo, Memory, UserSummary

T = TypeVar("T")

CLI_ACTOR = "cli"
"""Who a change made from the command line is recorded as made by."""


def parse_channel_key(value: str) -> str:
    """A channel key as :attr:`core.types.Place.channel_key` makes it: ``slack:TEAM:CHANNEL``
    or ``discord:GUILD:CHANNEL``. Raises ``MemoryInputError`` for anything else (empty, two
    parts, blank parts, control or invisible characters, a platform without channels:
    :attr:`core.platforms.Platform.channels`)."""
    key = value.strip()
    platform, parts = platform_of_key(key)
    if (
        len(parts) != 3
        or platform is None
        or not platform.channels
        or any(not p.strip() for p in parts)
        or needs_cleaning(key)
        or len(key) > 200
    ):
        raise MemoryInputError(
            f"malformed channel key {value[:80]!r}: slack:TEAM:CHANNEL or discord:GUILD:CHANNEL"
            " (selfmind channels list shows them)"
        )
    return key


def team_of(store: Store, settings: Settings) -> TeamMemory:
    """Team memory over ``store`` with the settings' dedupe threshold and admins."""
    from core.memory.team import TeamMemory, parse_allowed
    from core.rules.dedupe import Deduper

    return TeamMemory(
        store,
        deduper=Deduper(settings.dedupe_threshold),
        budget_tokens=settings.channel_memory_tokens,
        admins=parse_allowed(settings.channel_memory_admins),
    )


async def require_channel(store: Store, key: str) -> ChannelInfo:
    """The channel's row; ``MemoryInputError`` for a channel the store has never seen."""
    info = await store.channel(channel_key=key)
    if info is None:
        raise MemoryInputError(
            f"no channel {key} in this database (selfmind channels list shows the channels"
            " the bot has seen; a channel appears once the bot is talked to there)"
        )
    return info


async def people(store: Store) -> list[UserSummary]:
    """The store's users without the channels (``selfmind users``): a channel's key owns its
    memory's entries, but it is ``selfmind channels list`` that shows channels."""
    channels = await channel_keys(store)
    return [u for u in await store.users() if u.user_key not in channels]


def channel_row(info: ChannelInfo) -> dict[str, Any]:
    """One channel as ``channels list --json`` prints it."""
    return {
        "key": info.key,
        "platform": info.platform,
        "workspace": info.workspace,
        "channel": info.channel,
        "kind": info.kind,
        "memory": "on" if info.memory_on else "off",
        "needs_review": info.needs_review,
        "entries": info.entries,
        "changed_by": info.changed_by,
        "changed_at": info.changed_at.isoformat() if info.changed_at else None,
        "allowed": list(info.allowed),
    }


def entry_row(memory: Memory, said: Attribution | None) -> dict[str, Any]:
    """One entry as ``memories list --channel --json`` prints it."""
    return {
        "id": memory.id,
        "text": memory.text,
        "kind": memory.kind,
        "category": memory.category,
        "created_at": memory.created_at.isoformat(),
        "said_by": said.said_by if said else None,
        "said_by_name": said.said_by_name if said else None,
        "said_at": said.said_at.isoformat() if said else None,
        "link": said.link if said else None,
        "changed_by": said.changed_by if said else None,
    }


# --- the work of the ``memories --channel`` commands (run by bots.cli over a store)


async def remember_entry(store: Store, settings: Settings, key: str, text: str) -> Change:
    await require_channel(store, key)
    return await team_of(store, settings).remember(channel_key=key, text=text, by=CLI_ACTOR)


async def list_entries(
    store: Store, settings: Settings, key: str, limit: int, offset: int
) -> list[dict[str, Any]]:
    await require_channel(store, key)
    rows = await team_of(store, settings).entries(key, limit=limit, offset=offset)
    return [entry_row(m, s) for m, s in rows]


async def forget_entry(store: Store, settings: Settings, key: str, memory_id: int) -> Change:
    await require_channel(store, key)
    return await team_of(store, settings).forget(channel_key=key, memory_id=memory_id, by=CLI_ACTOR)


def print_entries(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    if not rows:
        typer.echo("no entries")
    for r in rows:
        who = f"  ({r['said_by_name'] or r['said_by'] or 'someone'})" if r["said_at"] else ""
        typer.echo(f"#{r['id']}  {r['text']}{who}")


Run = Callable[[Coroutine[Any, Any, Any]], Any]
WithStore = Callable[[Any, Callable[["Store"], Awaitable[Any]]], Coroutine[Any, Any, Any]]


def channels_commands(*, run: Run, with_store: WithStore, fail: Callable[..., Exception]) -> Any:
    """The ``selfmind channels`` group, its commands running through the CLI's ``run``
    (errors as one line, exit 1) over ``with_store`` (an existing database)."""
    channels_app = typer.Typer(
        help="Channels the bot has seen and their own memory (team memory).",
        no_args_is_help=True,
    )

    def key_of(value: str) -> str:
        try:
            return parse_channel_key(value)
        except MemoryInputError as exc:
            raise fail(str(exc)) from None

    @channels_app.command("list")
    def channels_list(
        ctx: typer.Context,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Each channel seen: its key, its memory on or off, its entries."""
        rows = run(with_store(ctx.obj, lambda store: store.list_channels()))
        if as_json:
            typer.echo(json.dumps([channel_row(i) for i in rows], ensure_ascii=False))
            return
        if not rows:
            typer.echo("no channels yet")
            return
        typer.echo(f"{'channel':<44}{'kind':<16}{'memory':<8}{'entries':>8}")
        for i in rows:
            state = "review" if i.memory_on and i.needs_review else ("on" if i.memory_on else "off")
            typer.echo(f"{i.key:<44}{i.kind:<16}{state:<8}{i.entries:>8}")

    @channels_app.command("memory")
    def channels_memory(
        ctx: typer.Context,
        state: Annotated[str, typer.Argument(metavar="on|off")],
        key: Annotated[str, typer.Argument(metavar="KEY", help="slack:T:C or discord:G:C")],
        allow: Annotated[
            list[str] | None,
            typer.Option("--allow", help="Only these user keys may turn it on or off there."),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Turn a channel's memory on or off (off keeps its entries, unused). Takes effect
        on the bot's next message there."""
        if state not in ("on", "off"):
            raise fail(f"{state!r} is not on or off", 2)
        channel = key_of(key)
        allowed = None if allow is None else [a.strip() for a in allow if a.strip()]

        async def work(store: Store) -> ChannelInfo:
            from dataclasses import replace

            from core.types import utcnow

            await require_channel(store, channel)
            info = await store.set_channel_memory(
                channel_key=channel, on=state == "on", by=CLI_ACTOR, at=utcnow(), allowed=allowed
            )
            assert info is not None  # seen just above; channels are never deleted
            return replace(info, entries=await store.count(user_key=channel))

        info = run(with_store(ctx.obj, work))
        if as_json:
            typer.echo(json.dumps(channel_row(info), ensure_ascii=False))
        else:
            typer.echo(f"memory of {channel} is {state} ({info.entries} entries kept)")

    @channels_app.command("undo")
    def channels_undo(
        ctx: typer.Context,
        key: Annotated[str, typer.Argument(metavar="KEY")],
        token: Annotated[str, typer.Argument(metavar="TOKEN", help="From the change's output.")],
    ) -> None:
        """Undo one change of a channel's memory (within 7 days, once)."""
        channel = key_of(key)

        async def work(store: Store) -> int:
            await require_channel(store, channel)
            team = team_of(store, ctx.obj.settings)
            return await team.undo(channel_key=channel, token=token, by=CLI_ACTOR)

        done = run(with_store(ctx.obj, work))
        typer.echo(f"undone ({done} entries changed)")

    return channels_app
