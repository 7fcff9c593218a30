"""The channel-memory commands both platforms share (team memory, :mod:`core.memory.team`):
one grammar, one set of replies; each adapter keeps only how a command arrives and how the
reply is posted.

Grammar (the words after ``/memories channel`` on Slack; Discord's ``/memories channel``
subcommands map to the same verbs)::

    [list [PAGE]]        the channel's entries, newest first, who said each (only the caller)
    add TEXT             add an entry                                          (announced)
    correct ID TEXT      replace an entry's text                               (announced)
    forget ID            take an entry out                                     (announced)
    undo TOKEN           undo one of those changes (7 days, once)              (announced)
    on | off             turn the channel's memory on or off                   (announced)

``/remember channel TEXT`` is ``add``, ``/memory channel on|off`` is ``on``/``off``. A reply
is :class:`TeamReply`: ``public`` replies are posted where the command was used, for
everyone there to see; the others only to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import MemoryInputError, MemoryNotFound, PlanNotPending
from core.memory.service import parse_memory_id
from core.memory.team import NOT_A_CHANNEL, PAGE_SIZE, TeamMemory
from core.types import Place

USAGE = (
    "Team memory: `/memories channel` lists this channel's memory; `/memories channel add "
    "TEXT`, `correct ID TEXT`, `forget ID` and `undo TOKEN` change it; `/memory channel on` "
    "or `off` turns it on or off (off by default)."
)


@dataclass(frozen=True)
class TeamReply:
    """What to post: ``text``; ``public``: where the command was used, for everyone."""

    text: str
    public: bool = False


def _who(name: str | None) -> str:
    return name or "Someone"


def _undo(token: str) -> str:
    return f"Undo within 7 days: `/memories channel undo {token}`"


async def channel_command(
    team: TeamMemory,
    *,
    place: Place | None,
    user_key: str,
    user_name: str | None,
    text: str,
    can_manage: bool = True,
) -> TeamReply:
    """Run one channel-memory command (:data:`USAGE`) for ``user_key`` where ``place`` is.

    ``can_manage``: the platform's own permission to turn it on or off (Discord: Manage
    Channels). Bad input (empty text, an id of another channel, a token used or another
    channel's, a user not allowed) is answered with one clear sentence to the caller and
    changes nothing. Store errors propagate (the adapter answers them)."""
    channel_key = None if place is None else place.channel_key
    if place is None or channel_key is None:
        return TeamReply(NOT_A_CHANNEL)
    info = await team.store.see_channel(place=place)
    assert info is not None
    verb, _, rest = text.strip().partition(" ")
    verb, rest = verb.lower(), rest.strip()
    who = _who(user_name)
    try:
        if verb in ("", "list"):
            return await _list(team, channel_key, rest)
        if verb in ("on", "off") and not rest:
            changed = await team.switch(
                channel_key=channel_key, on=verb == "on", by=user_key, can_manage=can_manage
            )
            if changed.memory_on:
                return TeamReply(
                    f"{who} turned this channel's memory on: I will keep what the team settles "
                    "here (decisions, conventions, who owns what, where things live) and use "
                    "it when anyone asks in this channel or its threads. `/memories channel` "
                    "lists it; `/memory channel off` stops it.",
                    public=True,
                )
            return TeamReply(
                f"{who} turned this channel's memory off: its entries are kept but no longer "
                "used or added to. `/memory channel on` turns it back on.",
                public=True,
            )
        if verb in ("add", "remember"):
            if not rest:
                return TeamReply("Add what? `/memories channel add TEXT`.")
            change = await team.remember(
                channel_key=channel_key, text=rest, by=user_key, by_name=user_name
            )
            if change.status != "added":
                return TeamReply(f"This channel's memory already has that (#{change.memory_id}).")
            return TeamReply(
                f"{who} added to this channel's memory: #{change.memory_id} "
                f"“{change.text}”. {_undo(change.undo)}",
                public=True,
            )
        if verb == "forget" and rest:
            change = await team.forget(
                channel_key=channel_key, memory_id=parse_memory_id(rest), by=user_key
            )
            return TeamReply(
                f"{who} took #{change.memory_id} “{change.text}” out of this channel's "
                f"memory. {_undo(change.undo)}",
                public=True,
            )
        if verb == "correct":
            ref, _, new_text = rest.partition(" ")
            if not ref or not new_text.strip():
                return TeamReply("Correct how? `/memories channel correct ID TEXT`.")
            old_id = parse_memory_id(ref)
            change = await team.correct(
                channel_key=channel_key,
                memory_id=old_id,
                text=new_text,
                by=user_key,
                by_name=user_name,
            )
            return TeamReply(
                f"{who} corrected #{old_id} in this channel's memory: now #{change.memory_id} "
                f"“{change.text}”. {_undo(change.undo)}",
                public=True,
            )
        if verb == "undo" and rest:
            done = await team.undo(channel_key=channel_key, token=rest, by=user_key)
            return TeamReply(
                f"{who} undid a change to this channel's memory ({done} entries back as they "
                "were).",
                public=True,
            )
    except MemoryNotFound as exc:
        if exc.memory_id > 0:
            return TeamReply(
                f"This channel's memory has no entry #{exc.memory_id} (`/memories channel`"
                " lists them)."
            )
        return TeamReply("That is not an entry id (`/memories channel` lists them).")
    except (MemoryInputError, PlanNotPending) as exc:
        text_of = str(exc).rstrip(".")
        return TeamReply(text_of[:1].upper() + text_of[1:] + ".")
    return TeamReply(USAGE)


async def _list(team: TeamMemory, channel_key: str, rest: str) -> TeamReply:
    page = int(rest) if rest.isdigit() and 0 < int(rest) < 10_000 else 1
    info = await team.info(channel_key)
    total = await team.store.count(user_key=channel_key)
    rows = await team.entries(channel_key, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    if info.needs_review:
        state = (
            "kept while this channel was private, and unused since it became public until "
            "someone here reviews it and turns it on again (`/memory channel on`)"
        )
    else:
        state = "on" if info.memory_on else "off (`/memory channel on` turns it on)"
    head = f"This channel's memory is {state}; {total} entries."
    if not rows:
        return TeamReply(head if total == 0 or page == 1 else f"{head} No page {page}.")
    lines = [head]
    for memory, said in rows:
        when = (said.said_at if said else memory.created_at).date().isoformat()
        name = f", {said.said_by_name}" if said and said.said_by_name else ""
        lines.append(f"#{memory.id} {memory.text} ({when}{name})")
    if total > page * PAGE_SIZE:
        lines.append(f"More: `/memories channel list {page + 1}`")
    return TeamReply("\n".join(lines))
