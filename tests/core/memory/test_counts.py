"""Every count shown to a person agrees with the listings, on both backends (``store``): a
sentence its owner said in two places is stored once per place (one active copy per reach,
m024) and is counted once, as ``/memories`` lists it: the prompt's count line in the
owner's DM, ``/memories`` and the Home tab's "N memories" (the store's ``stats``)."""

from __future__ import annotations

from core.chat.prompt import stored_line
from core.memory.profile import MemoryContext, build_context
from core.memory.recall import BM25Recaller
from core.memory.service import MemoryService
from core.rules.places import usable_reaches
from core.store.seams import Store
from core.types import Place

ALICE = "slack:T1:UA"
TEA = "The user likes green tea."
PRIVATE = Place("slack", "private_channel", "T1", "G1")
PUBLIC = Place("slack", "public_channel", "T1", "C1")


async def two_places(store: Store) -> MemoryService:
    """Alice's tea learned in a private channel and again, word for word, in a public one
    (two copies), and one fact learned in her DM."""
    service = MemoryService(store, dedupe_threshold=0.7)
    for place in (PRIVATE, PUBLIC):
        await service.remember(user_key=ALICE, text=TEA, place=place)
    await service.remember(user_key=ALICE, text="I live in Lisbon")
    assert len(await store.export(user_key=ALICE)) == 3  # the copies are stored
    return service


async def test_a_sentence_said_in_two_places_is_counted_once_as_listed(store: Store) -> None:
    service = await two_places(store)
    listed = await service.list_memories(user_key=ALICE, limit=100)
    assert [m.text for m in listed].count(TEA) == 1 and len(listed) == 2
    assert await service.count(user_key=ALICE) == len(listed)
    stats = await service.stats(user_key=ALICE)  # the Home tab's "N memories"
    assert stats.total == len(listed)
    assert sum(stats.by_kind.values()) == sum(stats.by_category.values()) == len(listed)
    assert (await service.stats()).total == len(listed)  # the whole store's too
    # Forgetting the sentence forgets both copies; the counts follow.
    tea = next(m for m in listed if m.text == TEA)
    await service.forget(user_key=ALICE, memory_id=tea.id)
    assert await service.count(user_key=ALICE) == (await service.stats(user_key=ALICE)).total == 1


async def context_in(store: Store, message: str, place: Place | None) -> MemoryContext:
    """Alice's memory context for ``message`` said in ``place`` (None: her DM)."""
    return await build_context(
        store=store,
        recaller=BM25Recaller(store),
        user_key=ALICE,
        message=message,
        k=6,
        reach=usable_reaches(place),
        budget_tokens=600,
    )


async def test_the_dm_prompts_count_line_counts_a_sentence_once(store: Store) -> None:
    await two_places(store)
    context = await context_in(store, "hello", None)  # the owner's DM
    assert context.stored == 2
    assert stored_line(context).startswith("2 notes are stored about this user")
    assert [m.text for m in context.profile].count(TEA) <= 1
    # In the public channel the copy usable there is read; no count is said.
    public = await context_in(store, "what tea do I like", PUBLIC)
    shown = [m.text for m in public.profile] + [s.memory.text for s in public.recalled]
    assert shown == [TEA] and stored_line(public).startswith("Notes are stored")
