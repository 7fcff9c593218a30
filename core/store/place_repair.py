"""Places for memories stored before they had one (SQLite m017, PostgreSQL m014).

Each memory gets the place of the turn it was learned in: a memory learned in a shared
place whose conversation still holds a message of its owner gets the place that
conversation's key names (:func:`core.rules.places.place_of_conversation`: a Slack channel
thread is a private channel of its channel, or a group DM for a ``G`` id; a Discord server
conversation a private channel; the stored turns never said whether a channel was public,
so the narrowest), every other one (learned in a DM, by ``/remember`` without a place,
imported, or whose turns are gone) the owner's DM, the narrowest: a NULL ``place`` with the
column's default reach ``dm`` (:func:`core.rules.places.parse_place` reads NULL as the
owner's DM), so only the shared ones are rewritten. Text, ids and history are unchanged;
the reach token goes beside the place (:func:`core.rules.places.reach_of`).
"""

from __future__ import annotations

from core.rules.places import owner_dm, place_key, place_of_conversation, reach_of
from core.store.effects import Change, Effect
from core.store.text_repair import BATCH_ROWS, Execute, Fetch


async def count_shared(fetch: Fetch) -> Change:
    """The memories learned in a shared place before places existed, and their owners:
    each is narrowed by :func:`place_memories` (its channel, or the owner's DM). Read-only;
    reads only columns older than the migration."""
    rows = await fetch(
        "SELECT COUNT(*), COUNT(DISTINCT uid) FROM memories WHERE origin = 'shared'", ()
    )
    return Change(memories=int(rows[0][0]), users=int(rows[0][1]))


PLACE_MEMORIES = Effect(
    verb="narrow",
    done="narrowed",
    why="a memory learned in a channel was used in every channel of every workspace; it is"
    " now used only where it was learned (that channel, taken as private since the store"
    " never said; the owner's DM when the conversation is gone) and in the owner's DM, as"
    " docs/privacy.md's table says",
    count=count_shared,
)
"""SQLite ``m017_places``, PostgreSQL ``m014_places``."""


async def place_memories(*, fetch: Fetch, execute: Execute) -> int:
    """Give every memory learned in a shared place its place (the module's rule; the
    others keep NULL: the owner's DM); returns how many got a place other than the owner's
    DM. SQL with ``?`` placeholders (PostgreSQL's caller
    numbers them)."""
    widened = 0
    after = 0
    while True:
        rows = await fetch(
            "SELECT m.id, u.user_key, m.origin, m.conversation_key,"
            " CASE WHEN m.origin = 'shared' AND m.conversation_key IS NOT NULL AND EXISTS("
            "  SELECT 1 FROM turns t WHERE t.conversation_key = m.conversation_key"
            "  AND t.user_key = u.user_key) THEN 1 ELSE 0 END"
            " FROM memories m JOIN users u ON u.uid = m.uid"
            " WHERE m.id > ? AND m.origin = 'shared' AND m.place IS NULL"
            " ORDER BY m.id LIMIT ?",
            (after, BATCH_ROWS),
        )
        if not rows:
            return widened
        for memory_id, user_key, _origin, conversation_key, turn_kept in rows:
            owner = str(user_key)
            if int(turn_kept):
                place = place_of_conversation(str(conversation_key), user_key=owner, shared=True)
            else:
                place = owner_dm(owner)
            reach = reach_of(place)
            if reach == "dm":
                continue
            widened += 1
            await execute(
                "UPDATE memories SET place = ?, reach = ? WHERE id = ?",
                (place_key(place), reach, memory_id),
            )
        after = int(rows[-1][0])
