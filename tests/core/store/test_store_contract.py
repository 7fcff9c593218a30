"""The store contract for turns, claims, modes and usage, on SQLite and PostgreSQL alike
(the ``store`` fixture runs each test on both backends)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.errors import MemoryNotFound, StoreError
from core.rules.cleanup_ops import ChangeOp, MergeOp, RetireOp, SupersedeOp
from core.store.seams import Store
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory, NewTurn, UsageRecord, utcnow

ALICE, BOB = "slack:T1:U1", "slack:T1:U2"
DM = "slack:T1:D1"


def _user_turn(text: str, *, ref: str | None = None, key: str = DM, user: str = ALICE) -> NewTurn:
    return NewTurn(
        conversation_key=key,
        user_key=user,
        role="user",
        text=text,
        origin="private",
        sent_at=utcnow(),
        reflection="answering",
        platform_ref=ref,
        workspace="T1",
    )


async def test_find_turn_by_platform_ref_in_its_conversation_only(store: Store) -> None:
    asked = await store.add_turn(turn=_user_turn("Hi there", ref="1700000000.000100"))
    await store.finish_turn(turn_id=asked, answer="Hello!", answer_ref="1700000000.000200")
    found = await store.find_turn(conversation_key=DM, platform_ref="1700000000.000100")
    assert found is not None and found.id == asked and found.text == "Hi there"
    assert found.workspace == "T1" and found.role == "user"
    # Another conversation's message with the same id is not this one; the answer's own ref
    # names an assistant turn, which find_turn never returns.
    assert (
        await store.find_turn(conversation_key="slack:T1:D2", platform_ref="1700000000.000100")
        is None
    )
    assert await store.find_turn(conversation_key=DM, platform_ref="1700000000.000200") is None
    assert await store.get_turn(turn_id=10**9) is None
    assert await store.answer_to(turn_id=10**9) is None


async def test_a_thread_ref_is_kept_with_the_turn_both_ways_in(store: Store) -> None:
    """A DM thread's ``thread_ts`` (the conversation key names no thread) comes back with
    the turn, by add_turn and receive_turn alike, and from the recovery's query."""
    threaded = dataclasses.replace(_user_turn("In a thread", ref="1.2"), thread_ref="1.1")
    added = await store.add_turn(turn=threaded)
    received = await store.receive_turn(claim_keys=["event:Ev1"], turn=threaded)
    assert received is not None
    for turn_id in (added, received):
        turn = await store.get_turn(turn_id=turn_id)
        assert turn is not None and turn.thread_ref == "1.1"
    since = utcnow() - timedelta(minutes=5)
    found = await store.unanswered_turns(since=since, conversation_prefix="slack:")
    assert {t.thread_ref for t in found} == {"1.1"}
    top = await store.add_turn(turn=_user_turn("At the top", ref="1.3"))
    turn = await store.get_turn(turn_id=top)
    assert turn is not None and turn.thread_ref is None


async def test_a_reply_ref_is_recorded_on_the_user_turn_and_replaced(store: Store) -> None:
    asked = await store.add_turn(turn=_user_turn("Explain the plan", ref="1700000000.000100"))
    turn = await store.get_turn(turn_id=asked)
    assert turn is not None and turn.reply_ref is None
    await store.set_reply_ref(turn_id=asked, reply_ref="1700000000.000300")
    await store.set_reply_ref(turn_id=asked, reply_ref="1700000000.000300 1700000000.000400")
    since = utcnow() - timedelta(minutes=5)
    (unanswered,) = await store.unanswered_turns(since=since, conversation_prefix="slack:")
    assert unanswered.id == asked
    assert unanswered.reply_ref == "1700000000.000300 1700000000.000400"
    await store.set_reply_ref(turn_id=10**9, reply_ref="1.2")  # a forgotten turn: nothing
    assert await store.get_turn(turn_id=10**9) is None


async def test_finish_turn_of_unknown_turn_stores_nothing(store: Store) -> None:
    assert await store.finish_turn(turn_id=10**9, answer="lost") is None
    assert await store.recent_turns(conversation_key=DM, limit=10) == []
    assert await store.recent_turns(conversation_key=DM, limit=0) == []


async def test_unanswered_turns_are_those_without_an_answer(store: Store) -> None:
    since = utcnow() - timedelta(minutes=10)
    answered = await store.add_turn(turn=_user_turn("answered"))
    await store.finish_turn(turn_id=answered, answer="yes")
    cut = await store.add_turn(turn=_user_turn("cut by a crash"))
    await store.add_turn(turn=_user_turn("on discord", key="discord:42", user="discord:42"))
    found = await store.unanswered_turns(since=since, conversation_prefix="slack:")
    assert [t.id for t in found] == [cut]
    later = utcnow() + timedelta(minutes=1)
    assert await store.unanswered_turns(since=later, conversation_prefix="slack:") == []
    # Once answered it is no longer interrupted.
    await store.finish_turn(turn_id=cut, answer="late but whole")
    assert await store.unanswered_turns(since=since, conversation_prefix="slack:") == []


async def test_set_reflection_keeps_or_records_attempts(store: Store) -> None:
    turn_id = await store.add_turn(turn=_user_turn("I moved to Berlin."))
    await store.finish_turn(turn_id=turn_id, answer="Noted.")
    await store.set_reflection(turn_id=turn_id, state="pending", attempts=2)
    await store.set_reflection(turn_id=turn_id, state="pending")
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and (turn.reflection, turn.attempts) == ("pending", 2)
    await store.set_reflection(turn_id=turn_id, state="done")
    turn = await store.get_turn(turn_id=turn_id)
    assert turn is not None and (turn.reflection, turn.attempts) == ("done", 2)
    # (Which waiting turns ``turns_to_reflect`` hands out differs by design: PostgreSQL skips
    # those a live replica, this one included, already holds; see test_postgres_replicas.)


async def test_modes_are_per_user_and_on_by_default(store: Store) -> None:
    assert await store.get_mode(user_key=ALICE) == "on"
    await store.set_mode(user_key=ALICE, mode="paused")
    await store.set_mode(user_key=BOB, mode="off")
    assert (await store.get_mode(user_key=ALICE), await store.get_mode(user_key=BOB)) == (
        "paused",
        "off",
    )
    await store.set_mode(user_key=ALICE, mode="on")
    assert await store.get_mode(user_key=ALICE) == "on"
    assert await store.get_mode(user_key=BOB) == "off"


async def test_mark_once_and_claims(store: Store) -> None:
    assert await store.mark_once(mark="first-dm:U1")
    assert not await store.mark_once(mark="first-dm:U1")
    assert await store.claim_event(keys=[])  # nothing to claim: nothing refused
    assert await store.claim_event(keys=["ev:1", "ts:C1:1"])
    assert not await store.claim_event(keys=["ts:C1:1", "ev:2"])  # one key seen before
    assert await store.claim_event(keys=["ev:2"])  # the refused claim left nothing behind
    assert not await store.event_claimed_elsewhere(keys=["ev:1"])  # this process's own
    assert not await store.event_claimed_elsewhere(keys=[])


async def _record(store: Store, user: str, workspace: str | None, kind: str, n: int) -> None:
    await store.record_usage(
        usage=UsageRecord(
            user_key=user,
            workspace=workspace,
            kind=kind,  # type: ignore[arg-type]
            model="claude-test",
            input_tokens=n,
            output_tokens=2 * n,
            cache_read_input_tokens=3 * n,
            cache_creation_input_tokens=4 * n,
        )
    )


async def test_usage_report_and_daily_count_filter_by_user_and_workspace(store: Store) -> None:
    since = utcnow() - timedelta(hours=1)
    await _record(store, ALICE, "T1", "chat", 10)
    await _record(store, ALICE, "T1", "reflection", 1)
    await _record(store, BOB, "T2", "chat", 100)
    await _record(store, "discord:42", None, "chat", 5)
    old = datetime(2020, 1, 1, tzinfo=UTC)
    await store.record_usage(
        usage=UsageRecord(
            user_key=ALICE,
            workspace="T1",
            kind="chat",
            model="claude-test",
            input_tokens=7,
            output_tokens=7,
            cache_read_input_tokens=0,
            cache_creation_input_tokens=0,
            at=old,
        )
    )
    by_kind = {r.key: r for r in await store.usage_report(since=since)}
    assert by_kind["chat"].calls == 3 and by_kind["chat"].input_tokens == 115
    assert by_kind["reflection"].output_tokens == 2
    by_user = await store.usage_report(since=since, by="user", workspace="T1")
    assert [(r.key, r.calls, r.cache_read_input_tokens) for r in by_user] == [(ALICE, 2, 33)]
    by_ws = await store.usage_report(since=since, by="workspace")
    assert [r.key for r in by_ws] == ["", "T1", "T2"]
    alice = await store.usage_report(since=old, user_key=ALICE)
    assert {r.key: r.calls for r in alice} == {"chat": 2, "reflection": 1}
    assert await store.chat_messages_since(since=since) == 3
    assert await store.chat_messages_since(since=since, user_key=ALICE) == 1
    assert await store.chat_messages_since(since=since, workspace="T2") == 1
    assert await store.chat_messages_since(since=old, user_key=ALICE, workspace="T1") == 2
    with pytest.raises(ValueError, match="by must be one of"):
        await store.usage_report(since=since, by="bogus")


async def test_embeddings_stay_with_their_user_and_version_moves(store: Store) -> None:
    alice = await store.add_many(
        user_key=ALICE,
        memories=[NewMemory(text="The user drives a red car."), NewMemory(text="The user rows.")],
        dedupe=None,
    )
    bob = await store.add_many(
        user_key=BOB, memories=[NewMemory(text="The user owns a boat.")], dedupe=None
    )
    assert await store.embedding_version(user_key="cli:nobody", model="m") == (0, 0, 0)
    assert await store.put_embeddings(user_key=ALICE, model="m", items=[]) == 0
    assert await store.put_embeddings(user_key="cli:nobody", model="m", items=[(1, b"x")]) == 0
    before = await store.embedding_version(user_key=ALICE, model="m")
    assert before[1:] == (2, 0)
    # Bob's memory id is ignored when written under Alice.
    items = [(alice[0].id, b"\x01" * 8), (bob[0].id, b"\x02" * 8)]
    assert await store.put_embeddings(user_key=ALICE, model="m", items=items) == 1
    assert await store.active_embeddings(user_key=BOB, model="m") == []
    embedded = await store.embedding_version(user_key=ALICE, model="m")
    assert embedded[0] == before[0] and embedded[1:] == (2, 1)
    missing = await store.memories_without_embedding(model="m", user_key=ALICE)
    assert [(k, i) for k, i, _ in missing] == [(ALICE, alice[1].id)]
    assert await store.forget(user_key=ALICE, memory_id=alice[0].id)
    forgotten = await store.embedding_version(user_key=ALICE, model="m")
    assert forgotten[0] > embedded[0] and forgotten[1:] == (1, 0)
    assert await store.active_embeddings(user_key=ALICE, model="m") == []


async def test_sqlite_open_creates_a_private_folder(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "memory.db"
    store = await SQLiteStore.open(str(path))
    await store.close()
    assert path.exists() and (path.parent.stat().st_mode & 0o777) == 0o700


async def test_sqlite_open_refuses_bad_paths_and_settings(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="cannot create database"):
        await SQLiteStore.open(str(blocker / "memory.db"))
    with pytest.raises(StoreError, match="cannot"):
        await SQLiteStore.open(str(tmp_path))  # a folder, not a database file
    with pytest.raises(StoreError, match="synchronous must be normal or full"):
        await SQLiteStore.open(str(tmp_path / "memory.db"), synchronous="off")
    # Refused settings leave the file usable.
    store = await SQLiteStore.open(str(tmp_path / "memory.db"), synchronous="normal")
    await store.close()


async def _three(store: Store, user: str = ALICE) -> list[int]:
    added = await store.add_many(
        user_key=user,
        memories=[
            NewMemory(text="The user likes tea."),
            NewMemory(text="The user enjoys tea."),
            NewMemory(text="The user lives in Oslo."),
        ],
        dedupe=None,
    )
    return [r.id for r in added]


async def test_cleanup_change_refusals_change_nothing(store: Store) -> None:
    tea, tea2, oslo = await _three(store)
    bobs = await _three(store, BOB)
    before = await store.list_memories(user_key=ALICE, include_superseded=True)
    merge = MergeOp(
        ids=(tea, tea2), text="The user lives in Oslo.", kind="fact", category="general"
    )
    refused: list[tuple[list[ChangeOp], str | None, type[Exception]]] = [
        ([RetireOp(tea), SupersedeOp(old_id=tea, new_id=oslo)], "two operations", StoreError),
        ([RetireOp(bobs[0])], None, MemoryNotFound),  # another user's memory
        ([SupersedeOp(old_id=tea, new_id=10**9)], None, MemoryNotFound),
        ([merge], "duplicates another memory", StoreError),
    ]
    for ops, message, error in refused:
        with pytest.raises(error, match=message):
            await store.apply_change(user_key=ALICE, change_id="refused", ops=ops)
    with pytest.raises(MemoryNotFound):
        await store.apply_change(user_key="cli:nobody", change_id="x", ops=[RetireOp(tea)])
    assert await store.list_memories(user_key=ALICE, include_superseded=True) == before
    assert not [e for e in await store.history(user_key=ALICE) if e.change_id]
    assert await store.users_with_memories(at_least=3) == [ALICE, BOB]
    assert await store.users_with_memories(at_least=4) == []


async def test_a_merge_keeps_whose_fact_and_its_days(store: Store) -> None:
    """A cleanup merge (consolidation, the audit's rewording) of memories about another
    person keeps that person and the days the parts hold; parts about different people are
    never merged (the merged one would become the user's own fact)."""
    from datetime import date

    added = await store.add_many(
        user_key=ALICE,
        memories=[
            NewMemory(
                text="The user's manager, Sarah, is in Lisbon.",
                about="Sarah",
                valid_from=date(2026, 12, 10),
                valid_until=date(2026, 12, 12),
            ),
            NewMemory(
                text="Sarah, the user's manager, is visiting Lisbon.",
                about="sarah",
                valid_from=date(2026, 12, 11),
                valid_until=date(2026, 12, 14),
            ),
            NewMemory(text="The user likes Lisbon."),
        ],
        dedupe=None,
    )
    sarah, sarah2, own = (r.id for r in added)
    merge = MergeOp(
        ids=(sarah, sarah2),
        text="The user's manager, Sarah, is visiting Lisbon.",
        kind="fact",
        category="general",
    )
    (merged,) = (await store.apply_change(user_key=ALICE, change_id="m1", ops=[merge])).added
    got = await store.get(user_key=ALICE, memory_id=merged)
    assert got is not None and got.about == "Sarah" and not got.about_user
    assert (got.valid_from, got.valid_until) == (date(2026, 12, 10), date(2026, 12, 14))
    mixed = MergeOp(
        ids=(merged, own), text="The user and Sarah like Lisbon.", kind="fact", category="general"
    )
    with pytest.raises(StoreError, match="about different people"):
        await store.apply_change(user_key=ALICE, change_id="m2", ops=[mixed])
    assert (await store.get(user_key=ALICE, memory_id=own)) is not None


async def test_undo_refuses_unknown_repeated_and_built_on_changes(store: Store) -> None:
    tea, tea2, oslo = await _three(store)
    with pytest.raises(StoreError, match="no change 'c0' for this user"):
        await store.undo_change(user_key="cli:nobody", change_id="c0")
    merge = MergeOp(
        ids=(tea, tea2), text="The user loves tea.", kind="preference", category="general"
    )
    first = await store.apply_change(user_key=ALICE, change_id="c1", ops=[merge])
    (merged,) = first.added
    second = await store.apply_change(
        user_key=ALICE, change_id="c2", ops=[SupersedeOp(old_id=merged, new_id=oslo)]
    )
    assert second.superseded == (merged,)
    with pytest.raises(StoreError, match="no change 'c1' for this user"):
        await store.undo_change(user_key=BOB, change_id="c1")  # not Bob's change
    assert await store.undo_change(user_key=ALICE, change_id="c2") == 1
    # A later change that keeps the merged memory as the newer one builds on c1.
    await store.apply_change(
        user_key=ALICE, change_id="c3", ops=[SupersedeOp(old_id=oslo, new_id=merged)]
    )
    with pytest.raises(StoreError, match="a later change builds on 'c1'; undo it first"):
        await store.undo_change(user_key=ALICE, change_id="c1")
    assert await store.undo_change(user_key=ALICE, change_id="c3") == 1
    assert await store.undo_change(user_key=ALICE, change_id="c1") == 2
    with pytest.raises(StoreError, match="already undone"):
        await store.undo_change(user_key=ALICE, change_id="c1")
    texts = sorted(m.text for m in await store.list_memories(user_key=ALICE))
    assert texts == ["The user enjoys tea.", "The user likes tea.", "The user lives in Oslo."]


async def test_search_pool_bounds_the_candidates_and_never_the_top(store: Store) -> None:
    """``pool`` is how many index candidates are re-scored: a deeper list may come from a
    smaller pool, but never holds fewer than ``k`` when ``k`` memories match."""
    texts = [f"The user drinks tea number {i} on day {i}." for i in range(8)]
    texts += ["The user drinks tea with lemon, tea in the morning and tea at night."]
    await store.add_many(user_key=ALICE, memories=[NewMemory(text=t) for t in texts], dedupe=None)
    default = await store.search(user_key=ALICE, query="tea lemon", k=3)
    assert await store.search(user_key=ALICE, query="tea lemon", k=3, pool=500) == default
    assert default[0].memory.text.startswith("The user drinks tea with lemon")
    floored = await store.search(user_key=ALICE, query="tea", k=9, pool=1)
    assert len(floored) == 9  # the pool is at least k
    assert await store.search(user_key=BOB, query="tea", k=9, pool=50) == []
