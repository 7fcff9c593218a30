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

The rule is written once for every platform: a platform reads its own links and
conversation keys back (:attr:`core.platforms.Platform.linked_conversation`,
``conversation_place``). Where threads are places of their channel (Slack: a thread's link
and key name the channel), nothing moves.

Moves use the tables' own triggers (SQLite's FTS5 shards and both backends' per-user
counts): a row leaves recall (``superseded_by`` set to itself), takes its new owner, index
terms (``u{uid}_...``) and place, and comes back. SQL with ``?`` placeholders, the same on
both backends.
"""

from __future__ import annotations

from core.platforms import platform_of_key
from core.rules.places import parse_place, place_key, reach_of
from core.rules.text import index_terms
from core.store.effects import Change, Effect
from core.store.text_repair import Execute, Fetch
from core.types import Place

_ENTRIES = (
    "SELECT e.memory_id, e.channel_key, m.place, e.link, m.text, m.norm, m.superseded_by"
    " FROM channel_entries e JOIN memories m ON m.id = e.memory_id"
    " WHERE e.link IS NOT NULL AND m.reach LIKE 'in\\_%' ESCAPE '\\' ORDER BY e.memory_id"
)
"""Channels' entries with a link, learned while their channel was private."""

_PERSONAL = (
    "SELECT m.id, m.uid, m.conversation_key, m.place, m.norm, m.text FROM memories m"
    " WHERE m.conversation_key IS NOT NULL AND m.reach LIKE 'in\\_%' ESCAPE '\\'"
    " AND m.superseded_by IS NULL AND m.uid NOT IN (SELECT u.uid FROM users u"
    " JOIN channels c ON c.channel_key = u.user_key) ORDER BY m.id"
)
"""People's active memories learned in a private place, with their conversation."""

_TWIN = (
    "SELECT id FROM memories WHERE uid = ? AND norm = ? AND reach = ?"
    " AND superseded_by IS NULL AND id <> ?"
)


def thread_place(learned: Place | None, said: Place | None) -> Place | None:
    """Where a memory kept for the private channel ``learned`` was said when that is
    another private place of the same platform and workspace (``said``, the place its link
    or conversation names: a thread of the channel; a thread's conversation is a private
    place of its own, :attr:`core.platforms.Platform.conversation_place`), else None
    (said in the channel itself, or nothing tells)."""
    if learned is None or said is None or learned.kind != "private_channel":
        return None
    if said.kind != "private_channel" or said.channel in (None, learned.channel):
        return None
    same = (said.platform, said.workspace) == (learned.platform, learned.workspace)
    return said if same else None


def linked_place(channel_key: str, link: str) -> Place | None:
    """The place a channel entry's message link names, where its platform can read the
    link back (:attr:`core.platforms.Platform.linked_conversation`), else None."""
    platform, _ = platform_of_key(channel_key)
    parts = None if platform is None else platform.linked_conversation(link)
    return None if platform is None or parts is None else platform.conversation_place(parts)


def conversation_place(key: str) -> Place | None:
    """The shared place a conversation key names (None: a DM's, or a key nothing reads)."""
    platform, parts = platform_of_key(key)
    return None if platform is None else platform.conversation_place(parts)


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


async def _thread_owner(fetch: Fetch, execute: Execute, parent: str, place: Place) -> int:
    """The uid of the own memory of ``place`` (a thread of channel ``parent``): its channel
    row (memory off) and owner made from its parent's when missing."""
    key = place.channel_key
    await execute(
        "INSERT INTO channels(channel_key, platform, workspace, channel, kind, seen_at)"
        " SELECT ?, platform, workspace, ?, 'private_channel', seen_at FROM channels"
        " WHERE channel_key = ? ON CONFLICT (channel_key) DO NOTHING",
        (key, place.channel, parent),
    )
    await execute(
        "INSERT INTO users(user_key, created_at) SELECT ?, created_at FROM users"
        " WHERE user_key = ? ON CONFLICT (user_key) DO NOTHING",
        (key, parent),
    )
    rows = await fetch("SELECT uid FROM users WHERE user_key = ?", (key,))
    return int(rows[0][0])


async def _twin(fetch: Fetch, uid: int, norm: str, place: Place, memory_id: int) -> int | None:
    rows = await fetch(_TWIN, (uid, norm, reach_of(place), memory_id))
    return int(rows[0][0]) if rows else None


async def count_thread_learned(fetch: Fetch) -> Change:
    """The team entries and people's memories :func:`move_thread_learned` moves, and their
    owners. Read-only."""
    owners: set[object] = set()
    n = 0
    for _id, parent, place, link, *_ in await fetch(_ENTRIES, ()):
        if thread_place(parse_place(place), linked_place(str(parent), str(link))):
            n += 1
            owners.add(parent)
    for _id, uid, key, place, *_ in await fetch(_PERSONAL, ()):
        if thread_place(parse_place(place), conversation_place(str(key))):
            n += 1
            owners.add(uid)
    return Change(memories=n, users=len(owners))


THREAD_PLACES = Effect(
    verb="narrow",
    done="narrowed",
    why="what was learned in a thread of a private channel, before a private thread was a"
    " place of its own, was kept for the whole channel (a private thread's team decisions in"
    " the channel's memory); it is now the thread's (team entries move to the thread's own"
    " memory, off until turned on there), as docs/privacy.md says",
    count=count_thread_learned,
)
"""m026_thread_places."""


async def move_thread_learned(*, fetch: Fetch, execute: Execute) -> int:
    """The module's repair; returns how many memories it moved or narrowed."""
    moved = 0
    for memory_id, parent, stored, link, text, norm, superseded in await fetch(_ENTRIES, ()):
        place = thread_place(parse_place(stored), linked_place(str(parent), str(link)))
        thread_key = None if place is None else place.channel_key
        if place is None or thread_key is None:
            continue
        uid = await _thread_owner(fetch, execute, str(parent), place)
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
    for memory_id, uid, key, stored, norm, text in await fetch(_PERSONAL, ()):
        place = thread_place(parse_place(stored), conversation_place(str(key)))
        if place is None:
            continue
        twin = await _twin(fetch, int(uid), str(norm), place, int(memory_id))
        await _reowned(
            execute, int(memory_id), uid=int(uid), text=str(text), place=place, twin=twin,
            active=True,
        )  # fmt: skip
        moved += 1
    return moved


async def thread_places(fetch: Fetch, execute: Execute) -> Change:
    """m026 on either backend (its ``fetch`` and ``execute``): what it narrows, counted
    before, then narrowed."""
    before = await count_thread_learned(fetch)
    await move_thread_learned(fetch=fetch, execute=execute)
    return before
