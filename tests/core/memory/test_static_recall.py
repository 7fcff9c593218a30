"""The default recall (BM25 fused with static embeddings, numpy only) on both backends, the
previous-user-message rule, and the loader reading the installed wordllama files offline."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.errors import ConfigError
from core.memory.hybrid import (
    COSINE_BLOCK,
    DATED_FIRST,
    HybridRecaller,
    _UserMatrix,
    cosines,
    usable,
)
from core.memory.query import recall_query
from core.memory.service import MemoryService
from core.memory.static import INLINE_TEXTS, MODEL_NAME, StaticEmbedder, package_dir
from core.rules.dedupe import Deduper
from core.rules.places import reach_of
from core.runtime import open_recaller, open_store
from core.settings import load_settings
from core.store.seams import Store
from core.types import NewMemory, Origin, Place
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import dm, harness, memories_reply, memory_lines

ALICE, BOB = "cli:alice", "cli:bob"
DISTRACTORS = [
    "The user drinks green tea in the morning.",
    "The user's favourite film is Spirited Away.",
    "The user fixed a race condition in the billing worker last week.",
    "The user is reading a biography of Ada Lovelace.",
    "The user makes sourdough bread every Sunday.",
    "The user hosts a board game night once a month.",
    "The user writes a small blog about distributed systems.",
    "The user mentors two junior engineers.",
    "The user uses noise-cancelling headphones in the office.",
    "The user spent last summer hiking in the Dolomites.",
    "The user invests in index funds every month.",
    "The user is repainting the kitchen.",
    "The user does the crossword puzzle on Sundays.",
    "The user squashes commits before merging.",
    "The user codes in the JetBrains Mono font.",
]
EXAMPLES = [
    ("Which language should I use for the new service?",
     "The user writes Go and deploys with Kubernetes."),
    ("Any good restaurants in my city?", "The user lives in Lisbon."),
    ("Can you suggest a snack for the team offsite?", "The user is allergic to peanuts."),
]  # fmt: skip


@pytest.fixture
async def default_store(db_url: str) -> AsyncIterator[Store]:
    store = await open_store(db_url, load_settings())
    yield store
    await store.close()


def default_recaller(store: Store) -> HybridRecaller:
    recaller = open_recaller(store, load_settings())
    assert isinstance(recaller, HybridRecaller) and recaller.embedder.name == MODEL_NAME
    return recaller


PUBLIC = Place("slack", "public_channel", "T1", "C1")
"""A public channel: memories learned there are shared (the old ``origin="shared"``)."""


async def remember(store: Store, user: str, texts: list[str], origin: Origin = "private") -> None:
    place = PUBLIC if origin == "shared" else None
    await store.add_many(
        user_key=user,
        memories=[NewMemory(text=t, origin=origin, place=place) for t in texts],
        dedupe=None,
    )


async def test_default_recall_finds_facts_asked_for_in_other_words(
    default_store: Store,
) -> None:
    await remember(default_store, ALICE, DISTRACTORS + [fact for _, fact in EXAMPLES])
    recaller = default_recaller(default_store)
    for question, fact in EXAMPLES:
        found = await recaller.recall(user_key=ALICE, query=question, k=6)
        assert fact in [s.memory.text for s in found], question
        # BM25 alone finds none of them: no word in common.
        bm25 = await default_store.search(user_key=ALICE, query=question, k=6)
        assert fact not in [s.memory.text for s in bm25], question


async def test_default_recall_never_returns_another_users_memories(
    default_store: Store,
) -> None:
    await remember(default_store, ALICE, ["The user lives in Lisbon."])
    await remember(default_store, BOB, ["The user lives in Madrid.", *DISTRACTORS])
    recaller = default_recaller(default_store)
    for question, _ in EXAMPLES:
        found = await recaller.recall(user_key=ALICE, query=question, k=6)
        assert [s.memory.text for s in found] in ([], ["The user lives in Lisbon."])
        assert all(s.memory.user_key == ALICE for s in found)
    assert await recaller.recall(user_key="cli:nobody", query="my city", k=6) == []


async def test_recalls_of_more_users_at_once_than_the_cache_holds(
    default_store: Store,
) -> None:
    # While one recall reads its user's head, the others' may push that user out of the
    # cache: it must be put back, not moved (a KeyError here once crashed reflections).
    for user in (ALICE, BOB):
        await remember(default_store, user, ["The user lives in Lisbon.", *DISTRACTORS])
    recaller = HybridRecaller(default_store, StaticEmbedder(), cache_users=1, fusion="score")
    for user in (ALICE, BOB):
        await recaller.recall(user_key=user, query="Lisbon", k=2)
    for _ in range(3):
        results = await asyncio.gather(
            *(recaller.recall(user_key=u, query="Lisbon", k=2) for u in (ALICE, BOB) * 4)
        )
        assert all(r and r[0].memory.text == "The user lives in Lisbon." for r in results)
    assert len(recaller._cache) == 1


async def test_default_recall_respects_places(default_store: Store) -> None:
    await remember(default_store, ALICE, ["The user is allergic to peanuts."], origin="private")
    await remember(default_store, ALICE, DISTRACTORS, origin="shared")
    recaller = default_recaller(default_store)
    question = "Can you suggest a snack for the team offsite?"
    found = await recaller.recall(user_key=ALICE, query=question, k=50, reach=[reach_of(PUBLIC)])
    assert found and all(s.memory.place == PUBLIC for s in found)
    assert await recaller.recall(user_key=ALICE, query=question, k=6, reach=[]) == []
    found = await recaller.recall(user_key=ALICE, query=question, k=6, reach=["dm"])
    assert [s.memory.text for s in found] == ["The user is allergic to peanuts."]


async def test_default_recall_never_returns_superseded_or_forgotten(
    default_store: Store,
) -> None:
    await remember(default_store, ALICE, DISTRACTORS)
    recaller = default_recaller(default_store)
    paris = await default_store.add(
        user_key=ALICE, memory=NewMemory(text="The user lives in Paris."), dedupe=Deduper()
    )
    question = "Any good restaurants in my city?"
    found = await recaller.recall(user_key=ALICE, query=question, k=6)
    assert paris.id in {s.memory.id for s in found}
    lisbon = await default_store.add(
        user_key=ALICE,
        memory=NewMemory(text="The user moved to Lisbon in 2025."),
        dedupe=Deduper(),
        supersedes=[paris.id],
    )
    ids = {s.memory.id for s in await recaller.recall(user_key=ALICE, query=question, k=50)}
    assert lisbon.id in ids and paris.id not in ids
    await MemoryService(default_store).forget(user_key=ALICE, memory_id=lisbon.id)
    ids = {s.memory.id for s in await recaller.recall(user_key=ALICE, query=question, k=50)}
    assert lisbon.id not in ids and paris.id not in ids


async def test_a_user_who_forgot_everything_is_recalled_from_what_they_taught_since(
    default_store: Store,
) -> None:
    # A recaller keeps each user's matrix while the user's last memory event id (the head)
    # is the one it was built at. Forgetting everything appends events and removes none,
    # so the memories taught afterwards move the head past any head seen before, and the
    # matrix of the forgotten memories is never taken for theirs.
    forgotten = ["The user is allergic to peanuts.", *DISTRACTORS]
    await remember(default_store, ALICE, forgotten)
    recaller = default_recaller(default_store)
    snack = "Can you suggest a snack for the team offsite?"
    found = await recaller.recall(user_key=ALICE, query=snack, k=6)
    assert "The user is allergic to peanuts." in [s.memory.text for s in found]
    before = await default_store.memory_head(user_key=ALICE)
    assert await default_store.forget_all(user_key=ALICE) == len(forgotten)
    await remember(default_store, ALICE, ["The user lives in Lisbon.", *DISTRACTORS[:-1]])
    assert await default_store.memory_head(user_key=ALICE) > before + len(forgotten)
    city = "Any good restaurants in my city?"
    assert await default_store.search(user_key=ALICE, query=city, k=6) == []  # meaning only
    found = await recaller.recall(user_key=ALICE, query=city, k=6)
    assert "The user lives in Lisbon." in [s.memory.text for s in found]
    found = await recaller.recall(user_key=ALICE, query=snack, k=50)
    assert "The user is allergic to peanuts." not in [s.memory.text for s in found]


async def test_memories_stored_before_are_embedded_on_first_recall(db_url: str) -> None:
    plain = await open_store(db_url)
    await remember(plain, ALICE, ["The user is allergic to peanuts.", *DISTRACTORS])
    await plain.close()
    store = await open_store(db_url, load_settings())
    try:
        recaller = default_recaller(store)
        found = await recaller.recall(
            user_key=ALICE, query="Can you suggest a snack for the team offsite?", k=6
        )
        assert "The user is allergic to peanuts." in [s.memory.text for s in found]
        assert await recaller.reindex() == 0  # all embedded, stored under the model's tag
        version = await store.embedding_version(user_key=ALICE, model=MODEL_NAME)
        assert version[1] == version[2] == len(DISTRACTORS) + 1
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("text", "previous", "query"),
    [
        ("what about her?", "Can you recommend a book for my daughter?",
         "Can you recommend a book for my daughter?\nwhat about her?"),
        ("and the other one?", "How much does our staging cluster cost?",
         "How much does our staging cluster cost?\nand the other one?"),
        ("is it worth fixing?", "My car makes a grinding noise when I brake.",
         "My car makes a grinding noise when I brake.\nis it worth fixing?"),
        ("Which plants could I grow at home?", "I moved flats.",
         "Which plants could I grow at home?"),
        ("what about her?", None, "what about her?"),
        ("what about her?", "  ", "what about her?"),
        ("How do I set up a reverse proxy for it?", "Thanks!",
         "How do I set up a reverse proxy for it?"),
    ],
)  # fmt: skip
def test_recall_query_uses_the_previous_user_message_when_leaning_on_it(
    text: str, previous: str | None, query: str
) -> None:
    assert recall_query(text, previous) == query


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=3) as f:
        yield f


async def test_turn_loop_recalls_with_the_previous_user_message(
    fake: FakeAnthropic, db_url: str
) -> None:
    # BM25 recall (words must match), no profile: what is in the prompt is recall's.
    async with harness(fake, db_url, profile_tokens=0) as h:
        await h.store.add(  # a plain fact: left to recall, not in the standing profile
            user_key=ALICE,
            memory=NewMemory(text="The user's daughter Mia is seven."),
            dedupe=Deduper(),
        )
        for text in ("Can you recommend a book for my daughter?", "and what about a present?"):
            fake.enqueue("Sure.", kind="chat")
            fake.enqueue(memories_reply(), kind="extract")
            await h.say(dm(ALICE, text))
        await h.reflector.drain(10)
    first, second = (r.body["system"][-1]["text"] for r in fake.requests_of("chat"))
    assert any("Mia is seven" in line for line in memory_lines(first))
    assert any("Mia is seven" in line for line in memory_lines(second))


def test_loader_reads_the_installed_wheel_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the static embeddings tried the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    root = package_dir()
    assert "site-packages" in root.parts or "dist-packages" in root.parts
    sys.modules.pop("wordllama", None)
    vectors = StaticEmbedder().embed_now(["The user lives in Lisbon.", "", "城市"])
    assert vectors.shape == (3, 256) and vectors.dtype == np.float32
    assert np.linalg.norm(vectors[0]) == pytest.approx(1.0, abs=1e-5)
    assert not vectors[1].any()  # no tokens: the zero vector
    assert "wordllama" not in sys.modules  # read as files: its import side effects avoided


def test_loader_without_its_files_is_one_config_error(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "l2_supercat_256.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="cannot load static embeddings"):
        StaticEmbedder(tmp_path).embed_now(["x"])


async def test_a_named_day_puts_that_days_memories_first(default_store: Store) -> None:
    # "Which film did I watch on 1 May, 2022?" shares words with a film memory of another
    # day; the one stored on that day (or in the days after) comes first.
    def on(day: int, text: str) -> NewMemory:
        at = datetime(2022, 5, day, 18, 0, tzinfo=UTC)
        return NewMemory(text=text, created_at=at, updated_at=at)

    await default_store.add_many(
        user_key=ALICE,
        memories=[
            on(1, "The user watched a film about whales with a friend last month."),
            on(2, "The user watched The Lord of the Rings trilogy and loved it."),
            on(20, "The user's favourite film is Spirited Away."),
            *(on(20, t) for t in DISTRACTORS),
        ],
        dedupe=None,
    )
    recaller = default_recaller(default_store)
    question = "Which film did I watch on 1 May, 2022?"
    found = await recaller.recall(user_key=ALICE, query=question, k=3)
    assert {s.memory.text for s in found[:2]} == {
        "The user watched a film about whales with a friend last month.",
        "The user watched The Lord of the Rings trilogy and loved it.",
    }
    assert [s.score >= DATED_FIRST for s in found] == [True, True, False]
    # Without the date, the favourite film (its own words) is among the first.
    found = await recaller.recall(user_key=ALICE, query="Which film did I watch?", k=3)
    assert "The user's favourite film is Spirited Away." in [s.memory.text for s in found]
    # A named day without memories puts nothing first; a channel's filter still holds.
    found = await recaller.recall(user_key=ALICE, query="Which film in May 1999?", k=3)
    assert found and all(s.score < DATED_FIRST for s in found)
    shared = [reach_of(PUBLIC)]
    assert await recaller.recall(user_key=ALICE, query=question, k=3, reach=shared) == []


async def test_a_failing_embedding_cancels_the_search_it_overlaps(default_store: Store) -> None:
    # The BM25 search runs while the query is embedded: when the embedding fails, the error
    # is the recall's and the search is not left running behind it.
    await remember(default_store, ALICE, ["The user lives in Lisbon.", *DISTRACTORS])
    recaller = default_recaller(default_store)
    await recaller.recall(user_key=ALICE, query="Lisbon", k=2)  # matrix cached
    searches: list[asyncio.Task[Any]] = []
    search = default_store.search

    async def tracked(**kwargs: Any) -> Any:
        task = asyncio.current_task()
        assert task is not None
        searches.append(task)
        await asyncio.sleep(0.05)  # still running when the embedding fails
        return await search(**kwargs)

    class Broken(StaticEmbedder):
        async def embed(self, texts: Any) -> Any:
            raise RuntimeError("embedding failed")

    recaller.embedder = Broken()
    recaller.embedder.name = MODEL_NAME
    default_store.search = tracked  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="embedding failed"):
        await recaller.recall(user_key=ALICE, query="Lisbon", k=2)
    assert len(searches) == 1 and searches[0].cancelled()


def test_cosines_are_each_vectors_own_products_at_their_best() -> None:
    # One matrix-vector product a query vector: the cosines of a query and its expansions
    # are exactly what each vector alone gets (one product of all of them sums otherwise).
    rng = np.random.default_rng(7)
    columns = rng.standard_normal((256, COSINE_BLOCK)).astype(np.float32)
    vectors = rng.standard_normal((4, 256)).astype(np.float32)
    expected = np.max([vector @ columns for vector in vectors], axis=0)
    assert np.array_equal(cosines(vectors, columns), expected)
    assert np.array_equal(cosines(vectors[:1], columns), vectors[0] @ columns)
    # A larger matrix, several vectors: block after block, each vector's own products on
    # each block, their best; a block's products round as the whole matrix's do but for a
    # few (OpenBLAS blocks the rows itself).
    columns = rng.standard_normal((256, 3 * COSINE_BLOCK + 213)).astype(np.float32)
    blocks = [
        columns[:, at : at + COSINE_BLOCK] for at in range(0, 3 * COSINE_BLOCK + 213, COSINE_BLOCK)
    ]
    by_block = np.concatenate([np.max([v @ block for v in vectors], axis=0) for block in blocks])
    assert np.array_equal(cosines(vectors, columns), by_block)
    whole = np.max([vector @ columns for vector in vectors], axis=0)
    assert np.allclose(cosines(vectors, columns), whole, rtol=0, atol=1e-5)
    assert np.array_equal(cosines(vectors[:1], columns), vectors[0] @ columns)


def test_the_place_mask_is_the_reach_tokens_membership() -> None:
    rng = np.random.default_rng(3)
    tokens = ["dm", "shared:slack:T1", "private:slack:T1:C2", "shared:discord:G1"]
    rows = [(i, str(rng.choice(tokens)), b"\0" * 8, "2026-12-01") for i in range(200)]
    data = _UserMatrix(rows)
    reaches = np.array([r[1] for r in rows])
    for reach in (["dm"], ["shared:slack:T1", "private:slack:T1:C2"], ["nowhere"], tokens):
        assert np.array_equal(usable(data, reach), np.isin(reaches, reach))
    assert usable(_UserMatrix([]), ["dm"]).shape == (0,)


def test_a_query_embeds_as_a_batch_does() -> None:
    # A few texts are tokenised one by one on the caller's thread, many as one batch: the
    # same vectors either way.
    embedder = StaticEmbedder()
    texts = [f"{question} {fact}" for question, fact in EXAMPLES] + DISTRACTORS * 3
    assert len(texts) > INLINE_TEXTS
    batch = embedder.embed_now(texts)
    one_by_one = np.vstack([embedder.embed_now(texts[i : i + 4]) for i in range(0, len(texts), 4)])
    assert np.array_equal(batch, one_by_one)
