"""Store.users(): every user key with counts and last activity, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime

from core.memory.service import MemoryService
from core.store.seams import Store
from core.types import NewTurn

SENT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def test_users_lists_memory_owners_and_speakers(store: Store, service: MemoryService) -> None:
    assert await store.users() == []
    first = await service.remember(user_key="slack:T1:U1", text="The user likes tea.")
    await service.remember(user_key="slack:T1:U1", text="The user lives in Oslo.")
    await service.forget(user_key="slack:T1:U1", memory_id=first.id)
    # Only spoke, never remembered anything: still a user an operator must be able to find.
    await store.add_turn(turn=NewTurn(
        conversation_key="discord:dm:42", user_key="discord:42", role="user", text="hi",
        origin="private", sent_at=SENT,
    ))  # fmt: skip
    await store.add_turn(turn=NewTurn(
        conversation_key="discord:dm:42", user_key=None, role="assistant", text="hello",
        origin="private", sent_at=SENT,
    ))  # fmt: skip

    users = await store.users()

    assert [u.user_key for u in users] == ["discord:42", "slack:T1:U1"]
    speaker, owner = users
    assert (speaker.memories, speaker.turns, speaker.last_active) == (0, 1, SENT)
    assert (owner.memories, owner.turns) == (1, 0)  # the forgotten one does not count
    assert owner.last_active is not None and owner.last_active > SENT


async def test_users_for_one_key(store: Store, service: MemoryService) -> None:
    await service.remember(user_key="cli:alice", text="The user likes tea.")
    await store.add_turn(turn=NewTurn(
        conversation_key="cli:bob", user_key="cli:bob", role="user", text="hi",
        origin="private", sent_at=SENT,
    ))  # fmt: skip
    assert [u.user_key for u in await store.users(user_key="cli:alice")] == ["cli:alice"]
    assert [(u.user_key, u.turns) for u in await store.users(user_key="cli:bob")] == [
        ("cli:bob", 1)
    ]
    assert await store.users(user_key="cli:al") == []
    assert await store.users(user_key="cli:alice' OR 1=1 --") == []
