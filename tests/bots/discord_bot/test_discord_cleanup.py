"""``/memories cleanup`` on Discord, through the real discord.py tree against the fake Discord
and fake Claude: deferred, ephemeral, buttons only the caller can press, one undoable change."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.discord_bot.client import SelfMindBot
from bots.discord_bot.commands import MAX_CONTENT_CHARS
from core.chat.controls import NOT_ENABLED
from core.memory.cleanup_review import (
    CANCELLED,
    CHANGED,
    NO_MEMORIES,
    NO_MODEL,
    NOTHING_TO_CLEAN,
    UNUSABLE_PLAN,
    USER_ADDED_MARK,
)
from tests.cleanup_helpers import (
    DARK,
    KEPT,
    MERGED,
    NEW_HOME,
    OLD_HOME,
    planner,
    seed,
    seed_reminders,
)
from tests.discord_helpers import World, buttons, command, final_text, key, running_bot, world
from tests.fakes.anthropic_server import not_json
from tests.fakes.discord_server import FakeInteraction, FakeUser

pytestmark = pytest.mark.usefixtures("no_errors")


@pytest.fixture
async def w(tmp_path: Path) -> AsyncIterator[World]:
    async with world(tmp_path) as w:
        w.claude.responder = planner
        yield w


async def cleanup(w: World, user: FakeUser) -> tuple[int, str]:
    """``/memories cleanup``: deferred ephemerally at once; the plan message's id and text."""
    interaction, response = await command(w.discord, "memories cleanup", user)
    assert (response.type, response.ephemeral) == (5, True)
    content = await final_text(w.discord, interaction)
    assert interaction.original_message_id is not None
    return interaction.original_message_id, content


async def press(w: World, message_id: int, label: str, user: FakeUser) -> FakeInteraction:
    button = buttons(w.discord, message_id)[label]
    return await w.discord.dispatch_component(message_id, button["custom_id"], user=user)


async def updated(w: World, click: FakeInteraction) -> str:
    """The plan message's text once a deferred button click edited it."""
    assert (await w.discord.wait_for_interaction_response(click)).type == 6
    await w.discord.wait_for_request("PATCH", f"/webhooks/*/{click.token}/messages/@original")
    assert click.message_id is not None
    return str(w.discord.message(click.message_id)["content"])


async def active(bot: SelfMindBot, user: FakeUser) -> list[str]:
    return sorted(m.text for m in await bot.rt.store.export(user_key=key(user)))


async def test_plan_only_for_the_caller_and_apply_is_one_undoable_change(
    w: World, bot: SelfMindBot
) -> None:
    await seed(bot.rt.store, key(w.alice))
    await bot.rt.service.remember(user_key=key(w.bob), text=DARK[0])
    before = await active(bot, w.alice)

    message_id, plan = await cleanup(w, w.alice)
    header, *lines = plan.splitlines()
    assert "6 memories: 2 operations" in header and USER_ADDED_MARK in header
    (merge,) = [line for line in lines if "merge" in line]
    assert merge.startswith(f"{USER_ADDED_MARK} merge") and "touches /remember memories" in merge
    assert set(buttons(w.discord, message_id)) == {"Apply", "Cancel"}
    assert w.discord.messages_in(w.discord.channel_id) == []  # only ephemeral answers
    assert await active(bot, w.alice) == before

    intruder = await press(w, message_id, "Apply", w.bob)
    refused = await w.discord.wait_for_interaction_response(intruder)
    assert refused.ephemeral and "someone else" in (refused.content or "")
    assert await active(bot, w.alice) == before

    done = await updated(w, await press(w, message_id, "Apply", w.alice))
    change_id = done.split("as change `")[1].split("`")[0]
    assert "6 → 3 memories" in done
    assert f"selfmind memories undo --user {key(w.alice)} {change_id}" in done
    assert await active(bot, w.alice) == sorted([MERGED, NEW_HOME, KEPT])
    history = await bot.rt.store.history(user_key=key(w.alice))
    assert sum(e.change_id == change_id for e in history) >= 4
    assert await active(bot, w.bob) == [DARK[0]]

    assert set(buttons(w.discord, message_id)) == {"Undo"}
    undone = await updated(w, await press(w, message_id, "Undo", w.alice))
    assert undone.startswith("Undone: 4 memories restored")
    assert await active(bot, w.alice) == before


async def test_cancel_changes_nothing(w: World, bot: SelfMindBot) -> None:
    await seed(bot.rt.store, key(w.alice))
    before = await active(bot, w.alice)
    message_id, _ = await cleanup(w, w.alice)
    click = await press(w, message_id, "Cancel", w.alice)
    assert (await w.discord.wait_for_interaction_response(click)).type == 7
    assert w.discord.message(message_id)["content"] == CANCELLED
    assert w.discord.message(message_id)["components"] == []
    assert await active(bot, w.alice) == before


async def test_a_malformed_plan_or_changed_memories_change_nothing(
    w: World, bot: SelfMindBot
) -> None:
    await seed(bot.rt.store, key(w.alice))
    before = await active(bot, w.alice)
    w.claude.enqueue(not_json(), kind="extract", times=5)
    message_id, answer = await cleanup(w, w.alice)
    assert answer == UNUSABLE_PLAN and w.discord.message(message_id)["components"] == []
    assert await active(bot, w.alice) == before

    w.claude.reset()  # drop the malformed replies left over
    message_id, _ = await cleanup(w, w.alice)
    memories = await bot.rt.store.export(user_key=key(w.alice))
    paris = next(m for m in memories if m.text == OLD_HOME)
    await bot.rt.service.forget(user_key=key(w.alice), memory_id=paris.id)
    before = await active(bot, w.alice)
    assert await updated(w, await press(w, message_id, "Apply", w.alice)) == CHANGED
    assert await active(bot, w.alice) == before


async def test_a_long_plan_fits_in_one_message_and_apply_applies_all(
    w: World, bot: SelfMindBot
) -> None:
    await seed_reminders(bot.rt.store, key(w.alice), 45)
    message_id, plan = await cleanup(w, w.alice)
    assert len(plan) <= MAX_CONTENT_CHARS
    shown = sum(line.startswith("retire") for line in plan.splitlines())
    assert 0 < shown < 45
    assert f"… and {45 - shown} more. Apply applies all 45 operations." in plan
    done = await updated(w, await press(w, message_id, "Apply", w.alice))
    assert "45 → 0 memories" in done


async def test_one_line_answers(w: World, bot: SelfMindBot) -> None:
    assert (await cleanup(w, w.bob))[1] == NO_MEMORIES
    await bot.rt.service.remember(user_key=key(w.alice), text=KEPT)
    assert (await cleanup(w, w.alice))[1] == NOTHING_TO_CLEAN

    # The bot refuses to start without ANTHROPIC_API_KEY; a runtime without a model (what
    # open_runtime gives then) still answers the command with one line.
    calls = len(w.claude.requests_of("extract"))
    cleaner, bot.reviews.cleaner = bot.reviews.cleaner, None
    try:
        message_id, answer = await cleanup(w, w.alice)
    finally:
        bot.reviews.cleaner = cleaner
    assert answer == NO_MODEL and w.discord.message(message_id)["components"] == []
    assert len(w.claude.requests_of("extract")) == calls


async def test_outside_the_allow_lists_nothing_is_planned(w: World) -> None:
    async with running_bot(w, allowed_users=key(w.bob)) as bot:
        await seed(bot.rt.store, key(w.alice))
        _, response = await command(w.discord, "memories cleanup", w.alice)
        assert response.ephemeral and response.content == NOT_ENABLED
    assert w.claude.requests_of("extract") == []
