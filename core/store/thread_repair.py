"""What was learned in a Discord thread of a private channel before a private thread was a
place of its own (m026, both backends).

Until then a thread of a private channel, private or not, was a place of that channel
(:func:`bots.discord_bot.places.discord_place`), so what was learned in a private thread
was kept for the whole channel: its team decisions in the channel's own memory (team
memory: shown in every answer there and in ``/memories channel``), a person's facts usable
for them anywhere in the channel, before members who were not invited to the thread.

**What the rows tell.** A team entry learned by reflection keeps a link to the message it
was said in (``channel_entries.link``: ``https://discord.com/channels/{guild}/{channel or
thread}/{message}``); a person's memory learned by reflection keeps its conversation's key
(``discord:{guild}:{thread}`` for a thread). Both name the thread, neither says whether
it was private: a public thread of a private channel (which every member of the channel
reads) was stored the same way. An entry added by a command (``/memories channel add``)
and a ``/remember`` have no link or conversation: the rows do not tell where they were made.

**The conservative choice.** Everything the rows show was learned in a thread of a private
channel is treated as learned in a private thread (the narrowest it may have been):

- a team entry moves to the thread's own memory (its key ``discord:{guild}:{thread}``, a
  private channel of its own; the thread's channel row is made with its memory off, so it
  is used only once someone in the thread turns it on, and listed there before that): the
  channel's memory no longer shows or recalls it. Who said it, when and the link go with
  it; a twin already in the thread's memory takes its place (it is kept superseded by it);
- a person's memory learned there is narrowed to the thread (used in it and in the
  person's DM; a twin already kept for the thread takes its place).

Nothing is erased, and nothing is widened. An entry of a public thread is then unused in
its channel (a public thread is a place of its channel, not of its own); its channel's
members may add it again, an operator may move it back (``selfmind memories list
--channel discord:{guild}:{thread}``, ``selfmind memories remember --channel ...``).
Entries added by a command and memories without a conversation stay where they are: the
rows cannot tell, and the command said whose memory it added to ("added to this channel's
memory"); any member can list and forget them.

Moves use the tables' own triggers (SQLite's FTS5 shards and both backends' per-user
counts): a row leaves recall (``superseded_by`` set to itself), takes its new owner, index
terms (``u{uid}_...``) and place, and comes back. SQL with ``?`` placeholders, the same on
both backends.
"""

from __future__ import annotations

import re

from core.rules.places import parse_place, place_key, reach_of
from core.rules.text import index_terms
from core.store.effects import Change, Effect
from core.store.text_repair import Execute, Fetch
from core.types import Place

THREAD_LINK = re.compile(r"^https://discord\.com/channels/(\d+)/(\d+)/\d+$")
"""A Discord message link: guild, channel or thread, message."""

_ENTRIES = (
    "SELECT e.memory_id, e.channel_key, c.workspace, c.channel, e.link, m.text, m.norm,"
    " m.superseded_by FROM channel_entries e JOIN channels c ON c.channel_key = e.channel_key"
    " JOIN memories m ON m.id = e.memory_id"
    " WHERE c.platform = 'discord' AND e.link IS NOT NULL AND m.reach LIKE 'in\\_%' ESCAPE '\\'"
    " ORDER BY e.memory_id"
)
"""Team entries with a link, of Discord channels, learned while the channel was private."""

_PERSONAL = (
    "SELECT m.id, m.uid, m.conversation_key, m.place, m.norm FROM memories m"
    " WHERE m.conversation_key LIKE 'discord:%' AND m.reach LIKE 'in\\_discord\\_%' ESCAPE '\\'"
    " AND m.superseded_by IS NULL AND m.uid NOT IN (SELECT u.uid FROM users u"
    " JOIN channels c ON c.channel_key = u.user_key) ORDER BY m.id"
)
"""People's active memories learned in a Discord private channel, with a conversation."""

_TWIN = (
    "SELECT id FROM memories WHERE uid = ? AND norm = ? AND reach = ?"
    " AND superseded_by IS NULL AND id <> ?"
)


def thread_of_link(link: str, *, guild: str | None, channel: str) -> str | None:
    """The thread ``link`` names when it is a message of another channel or thread than
    ``channel`` in ``guild`` (a thread of it: a channel's entries are said in it or its
    threads), else None."""
    found = THREAD_LINK.match(link)
    if found is None or found.group(1) != guild or found.group(2) == channel:
        return None
    return found.group(2)


def thread_of_conversation(key: str, place: Place | None) -> str | None:
    """The thread a Discord conversation key names (``discord:{guild}:{thread}``; a
    channel's conversation has a fourth part, its first message) when it is not the
    channel of ``place`` (a private channel of the same guild), else None."""
    parts = key.split(":")
    if len(parts) != 3 or place is None or place.kind != "private_channel":
        return None
    if parts[1] != place.workspace or parts[2] == place.channel or not parts[2].isdigit():
        return None
    return parts[2]


async def _reowned(
    execute: Execute,
    memory_id: int,
    *,
    uid: int,
    text: str,
    place: Place,
    twin: int | None,
    active: bool,
) -> None:
    """Memory ``memory_id`` owned by ``uid``, learned in ``place`` (out of recall and back,
    so the triggers move its index terms and counts); kept superseded by ``twin`` when one
    says the same there."""
    terms = " ".join(index_terms(uid, text))
    if active:
        await execute("UPDATE memories SET superseded_by = id WHERE id = ?", (memory_id,))
    await execute(
        "UPDATE memories SET uid = ?, terms = ?, place = ?, reach = ? WHERE id = ?",
        (uid, terms, place_key(place), reach_of(place), memory_id),
    )
    if active:
        await execute(
            "UPDATE memories SET superseded_by = ? WHERE id = ?",
            (twin, memory_id),
        )
    for table in ("memory_events", "memory_uses", "memory_embeddings"):
        await execute(f"UPDATE {table} SET uid = ? WHERE memory_id = ?", (uid, memory_id))


async def _thread_owner(fetch: Fetch, execute: Execute, parent: str, thread_key: str) -> int:
    """The uid of the thread's own memory, its channel row (memory off) and owner made
    from its parent's when missing."""
    guild, channel = thread_key.split(":")[1:]
    await execute(
        "INSERT INTO channels(channel_key, platform, workspace, channel, kind, seen_at)"
        " SELECT ?, 'discord', ?, ?, 'private_channel', seen_at FROM channels"
        " WHERE channel_key = ? ON CONFLICT (channel_key) DO NOTHING",
        (thread_key, guild, channel, parent),
    )
    await execute(
        "INSERT INTO users(user_key, created_at) SELECT ?, created_at FROM users"
        " WHERE user_key = ? ON CONFLICT (user_key) DO NOTHING",
        (thread_key, parent),
    )
    rows = await fetch("SELECT uid FROM users WHERE user_key = ?", (thread_key,))
    return int(rows[0][0])


async def _twin(fetch: Fetch, uid: int, norm: str, place: Place, memory_id: int) -> int | None:
    rows = await fetch(_TWIN, (uid, norm, reach_of(place), memory_id))
    return int(rows[0][0]) if rows else None


async def count_thread_learned(fetch: Fetch) -> Change:
    """The team entries and people's memories :func:`move_thread_learned` moves, and their
    owners. Read-only."""
    owners: set[object] = set()
    n = 0
    for _id, parent, guild, channel, link, *_ in await fetch(_ENTRIES, ()):
        if thread_of_link(str(link), guild=guild, channel=str(channel)):
            n += 1
            owners.add(parent)
    for _id, uid, key, place, _norm in await fetch(_PERSONAL, ()):
        if thread_of_conversation(str(key), parse_place(place)):
            n += 1
            owners.add(uid)
    return Change(memories=n, users=len(owners))


THREAD_PLACES = Effect(
    verb="narrow",
    done="narrowed",
    why="what was learned in a thread of a Discord private channel was kept for the whole"
    " channel (a private thread's team decisions in the channel's memory); it is now the"
    " thread's own (team entries move to the thread's memory, off until turned on there), as"
    " docs/privacy.md says",
    count=count_thread_learned,
)
"""m026_thread_places."""


async def move_thread_learned(*, fetch: Fetch, execute: Execute) -> int:
    """The module's repair; returns how many memories it moved or narrowed."""
    moved = 0
    for memory_id, parent, guild, channel, link, text, norm, superseded in await fetch(
        _ENTRIES, ()
    ):
        thread = thread_of_link(str(link), guild=guild, channel=str(channel))
        if thread is None:
            continue
        thread_key = f"discord:{guild}:{thread}"
        uid = await _thread_owner(fetch, execute, str(parent), thread_key)
        place = Place("discord", "private_channel", str(guild), thread)
        active = superseded is None
        twin = await _twin(fetch, uid, str(norm), place, int(memory_id)) if active else None
        await _reowned(
            execute, int(memory_id), uid=uid, text=str(text), place=place, twin=twin,
            active=active,
        )  # fmt: skip
        await execute(
            "UPDATE channel_entries SET channel_key = ? WHERE memory_id = ?",
            (thread_key, memory_id),
        )
        await execute(
            "UPDATE channels SET version = version + 1 WHERE channel_key IN (?, ?)",
            (parent, thread_key),
        )
        moved += 1
    for memory_id, uid, key, stored, norm in await fetch(_PERSONAL, ()):
        learned = parse_place(stored)
        thread = thread_of_conversation(str(key), learned)
        if thread is None or learned is None:
            continue
        place = Place("discord", "private_channel", learned.workspace, thread)
        twin = await _twin(fetch, int(uid), str(norm), place, int(memory_id))
        text = await fetch("SELECT text FROM memories WHERE id = ?", (memory_id,))
        await _reowned(
            execute, int(memory_id), uid=int(uid), text=str(text[0][0]), place=place,
            twin=twin, active=True,
        )  # fmt: skip
        moved += 1
    return moved


async def thread_places(fetch: Fetch, execute: Execute) -> Change:
    """m026 on either backend (its ``fetch`` and ``execute``): what it narrows, counted
    before, then narrowed."""
    before = await count_thread_learned(fetch)
    await move_thread_learned(fetch=fetch, execute=execute)
    return before
