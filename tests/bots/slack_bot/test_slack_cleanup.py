"""``/memories cleanup`` on Slack: a plan only the caller sees, Apply/Cancel only they can
press, applied as one undoable change, over signed HTTP against the fake Slack and Claude."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from bots.slack_bot.app import RunningSlackBot
from bots.slack_bot.blocks import MAX_BLOCKS, MAX_SECTION_CHARS
from bots.slack_bot.cleanup import APPLY_ACTION, CANCEL_ACTION, UNDO_ACTION
from core.chat.controls import NOT_ENABLED
from core.memory.cleanup_review import (
    CANCELLED,
    CHANGED,
    GONE,
    NO_MEMORIES,
    NO_MODEL,
    NOT_YOURS,
    NOT_YOURS_UNDO,
    NOTHING_TO_CLEAN,
    PLANNING,
    UNDO_GONE,
    UNUSABLE_PLAN,
    USER_ADDED_MARK,
)
from core.types import utcnow
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
from tests.fakes.anthropic_server import FakeAnthropic, not_json, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, JsonDict
from tests.slack_helpers import TEAM, buttons, click, key, running_bot, settle, slack_settings


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(responder=planner) as fake:
        yield fake


async def cleanup(slack: FakeSlack, bot: RunningSlackBot, *, user: str = "U1") -> list[JsonDict]:
    """``/memories cleanup``: the empty ack within 3 s, then every ephemeral answer."""
    started = time.monotonic()
    sent = await slack.send_slash_command(bot.events_url, "/memories", "cleanup", user=user)
    assert (sent.status, sent.text) == (200, "")
    assert time.monotonic() - started < 3.0
    await slack.wait_for_response(sent.sent["response_url"])
    await settle(bot)
    answers = slack.responses(sent.sent["response_url"])
    assert all(a.get("response_type") == "ephemeral" for a in answers)
    return answers


async def plan_of(slack: FakeSlack, bot: RunningSlackBot, user: str = "U1") -> JsonDict:
    planning, plan = await cleanup(slack, bot, user=user)
    assert planning["text"] == PLANNING
    return plan


def texts(plan: JsonDict) -> list[str]:
    return [b["text"]["text"] for b in plan["blocks"] if b["type"] == "section"]


def contexts(plan: JsonDict) -> str:
    blocks = [b for b in plan["blocks"] if b["type"] == "context"]
    return "\n".join(e["text"] for b in blocks for e in b["elements"])


async def active(bot: RunningSlackBot, user: str = "U1") -> list[str]:
    return sorted(m.text for m in await bot.runtime.store.export(user_key=key(user)))


async def test_plan_is_ephemeral_and_apply_is_one_undoable_change(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    store = bot.runtime.store
    await seed(store, key("U1"))
    await bot.runtime.service.remember(user_key=key("U2"), text=DARK[0])
    before = await active(bot)

    plan = await plan_of(slack, bot)
    header, *lines = texts(plan)
    assert "6 memories: 2 operations" in header and USER_ADDED_MARK in header
    (merge,) = [line for line in lines if "merge" in line]
    assert merge.startswith(f"{USER_ADDED_MARK} merge") and "[touches /remember memories" in merge
    assert any(line.startswith("supersede") and "Paris" in line for line in lines)
    [(apply_id, plan_id), (cancel_id, same)] = buttons(plan)
    assert (apply_id, cancel_id, same) == (APPLY_ACTION, CANCEL_ACTION, plan_id)
    assert await active(bot) == before  # showing a plan changes nothing
    assert slack.calls("chat.postMessage") == []  # nothing said where others could see

    applied = await click(slack, bot, APPLY_ACTION, plan_id, user="U1")
    assert applied["replace_original"] is True
    [(undo_id, undo_token)] = buttons(applied)
    assert undo_id == UNDO_ACTION
    change_id = applied["text"].split("as change `")[1].split("`")[0]
    assert f"6 → 3 memories, as change `{change_id}`" in applied["text"]
    assert f"selfmind memories undo --user {key('U1')} {change_id}" in applied["text"]
    assert await active(bot) == sorted([MERGED, NEW_HOME, KEPT])
    history = await store.history(user_key=key("U1"))
    assert sum(e.change_id == change_id for e in history) >= 4
    assert await active(bot, "U2") == [DARK[0]]

    theirs = await click(slack, bot, UNDO_ACTION, undo_token, user="U2")
    assert theirs["text"] == NOT_YOURS_UNDO
    forged = await click(slack, bot, UNDO_ACTION, change_id, user="U1")  # not a token
    assert forged["text"] == UNDO_GONE
    assert await active(bot) == sorted([MERGED, NEW_HOME, KEPT])
    undone = await click(slack, bot, UNDO_ACTION, undo_token, user="U1")
    assert undone["text"].startswith("Undone: 4 memories restored")
    assert await active(bot) == before
    again = await click(slack, bot, APPLY_ACTION, plan_id, user="U1")
    assert again["text"] == GONE and await active(bot) == before
    undo_again = await click(slack, bot, UNDO_ACTION, undo_token, user="U1")
    assert undo_again["text"] == UNDO_GONE and await active(bot) == before


async def test_a_replayed_apply_click_applies_once(slack: FakeSlack, bot: RunningSlackBot) -> None:
    """The same signed Apply interaction sent twice (a replay within Slack's 5-minute
    window): the plan is taken by the first; the second changes nothing."""
    await seed(bot.runtime.store, key("U1"))
    [(_, plan_id), _] = buttons(await plan_of(slack, bot))
    payload = slack.events.block_actions(APPLY_ACTION, plan_id, user="U1")
    payload["user"]["team_id"] = TEAM
    assert (await slack.send_interaction(bot.events_url, payload)).status == 200
    applied = await slack.wait_for_response(payload["response_url"])
    assert "6 → 3 memories" in applied["text"]
    after = await active(bot)
    await bot.runtime.service.remember(user_key=key("U1"), text=OLD_HOME)  # added since
    assert (await slack.send_interaction(bot.events_url, payload)).status == 200
    await slack.wait_until(
        lambda: len(slack.responses(payload["response_url"])) == 2, what="second response"
    )
    assert slack.responses(payload["response_url"])[1]["text"] == GONE
    assert await active(bot) == sorted([*after, OLD_HOME])
    history = await bot.runtime.store.history(user_key=key("U1"))
    assert len({e.change_id for e in history if e.change_id is not None}) == 1


async def test_only_the_owner_can_press_and_cancel_changes_nothing(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    await seed(bot.runtime.store, key("U1"))
    before = await active(bot)
    [(_, plan_id), _] = buttons(await plan_of(slack, bot))

    for action in (APPLY_ACTION, CANCEL_ACTION):
        refused = await click(slack, bot, action, plan_id, user="U2")
        assert refused["text"] == NOT_YOURS and "replace_original" not in refused
    assert await active(bot) == before
    cancelled = await click(slack, bot, CANCEL_ACTION, plan_id, user="U1")
    assert (cancelled["text"], cancelled["replace_original"]) == (CANCELLED, True)
    gone = await click(slack, bot, APPLY_ACTION, plan_id, user="U1")
    assert gone["text"] == GONE
    assert await active(bot) == before


async def test_a_malformed_plan_changes_nothing_and_says_so(
    slack: FakeSlack, claude: FakeAnthropic, bot: RunningSlackBot
) -> None:
    await seed(bot.runtime.store, key("U1"))
    before = await active(bot)
    claude.enqueue(not_json(), kind="extract", times=5)
    _, answer = await cleanup(slack, bot)
    assert answer["text"] == UNUSABLE_PLAN and "blocks" not in answer
    assert len(claude.requests_of("extract")) >= 1
    assert await active(bot) == before


async def test_changed_memories_or_an_expired_plan_change_nothing(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    await seed(bot.runtime.store, key("U1"))
    [(_, plan_id), _] = buttons(await plan_of(slack, bot))
    paris = next(
        m for m in await bot.runtime.store.export(user_key=key("U1")) if m.text == OLD_HOME
    )
    await bot.runtime.service.forget(user_key=key("U1"), memory_id=paris.id)
    before = await active(bot)
    changed = await click(slack, bot, APPLY_ACTION, plan_id, user="U1")
    assert (changed["text"], changed["replace_original"]) == (CHANGED, True)
    assert await active(bot) == before  # the merge was not applied either

    [(_, plan_id), _] = buttons(await plan_of(slack, bot))
    assert bot.bot.commands.cleanup is not None
    reviews = bot.bot.commands.cleanup.reviews
    reviews.clock = lambda: utcnow() + timedelta(seconds=reviews.ttl_s + 1)
    expired = await click(slack, bot, APPLY_ACTION, plan_id, user="U1")
    assert expired["text"] == GONE and await active(bot) == before


async def test_a_long_plan_fits_and_apply_applies_all_of_it(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    await seed_reminders(bot.runtime.store, key("U1"), 45)
    plan = await plan_of(slack, bot)
    assert len(plan["blocks"]) <= MAX_BLOCKS
    assert all(len(text) <= MAX_SECTION_CHARS for text in texts(plan))
    assert "… and 5 more. Apply applies all 45 operations." in contexts(plan)
    [(_, plan_id), _] = buttons(plan)
    applied = await click(slack, bot, APPLY_ACTION, plan_id, user="U1")
    assert "45 → 0 memories" in applied["text"]


async def test_one_line_answers(
    slack: FakeSlack, claude: FakeAnthropic, bot: RunningSlackBot
) -> None:
    assert await cleanup(slack, bot, user="U3") == [
        {"text": NO_MEMORIES, "response_type": "ephemeral"}
    ]
    await bot.runtime.service.remember(user_key=key("U1"), text=KEPT)
    _, tidy = await cleanup(slack, bot)
    assert tidy["text"] == NOTHING_TO_CLEAN and "blocks" not in tidy

    # The bot refuses to start without ANTHROPIC_API_KEY; a runtime without a model (what
    # open_runtime gives then) still answers the command with one line.
    calls = len(claude.requests_of("extract"))
    reviews = bot.bot.commands.cleanup.reviews
    cleaner, reviews.cleaner = reviews.cleaner, None
    try:
        [answer] = await cleanup(slack, bot)
    finally:
        reviews.cleaner = cleaner
    assert answer["text"] == NO_MODEL
    assert len(claude.requests_of("extract")) == calls


async def test_planning_counts_against_the_daily_token_cap(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db", user_daily_tokens=100)
    async with running_bot(settings) as running:
        await seed(running.runtime.store, key("U1"))
        assert len(await cleanup(slack, running)) == 2  # planned: the tokens are recorded
        calls = len(claude.requests_of("extract"))
        [limit] = await cleanup(slack, running)
        assert limit["text"].startswith("You've reached your daily limit of 100 tokens.")
        assert len(claude.requests_of("extract")) == calls


async def test_outside_the_allow_lists_nothing_is_planned(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db", allowed_users=key("U2"))
    async with running_bot(settings) as running:
        await seed(running.runtime.store, key("U1"))
        assert await cleanup(slack, running) == [
            {"text": NOT_ENABLED, "response_type": "ephemeral"}
        ]
        refused = await click(slack, running, APPLY_ACTION, "any-plan", user="U1")
        assert refused["text"] == NOT_ENABLED
    assert claude.requests_of("extract") == []


async def test_a_plan_made_on_one_replica_is_applied_on_the_other(
    slack: FakeSlack, claude: FakeAnthropic, pg_url: str, tmp_path: Path
) -> None:
    """Two bots on one PostgreSQL database (two replicas behind one Slack app): the plan
    shown by replica A is applied by a click that lands on replica B, once; its Undo works
    through A, once."""
    sqlite = slack_settings(slack, claude, tmp_path / "unused.db")
    settings = sqlite.model_copy(update={"db": pg_url})
    async with running_bot(settings) as a, running_bot(settings) as b:
        await seed(a.runtime.store, key("U1"))
        before = await active(a)
        [(_, plan_id), _] = buttons(await plan_of(slack, a))

        applied = await click(slack, b, APPLY_ACTION, plan_id, user="U1")
        assert "6 → 3 memories" in applied["text"]
        assert await active(a) == sorted([MERGED, NEW_HOME, KEPT])
        again = await click(slack, a, APPLY_ACTION, plan_id, user="U1")
        assert again["text"] == GONE

        [(_, undo_token)] = buttons(applied)
        undone = await click(slack, a, UNDO_ACTION, undo_token, user="U1")
        assert undone["text"].startswith("Undone: 4 memories restored")
        twice = await click(slack, b, UNDO_ACTION, undo_token, user="U1")
        assert twice["text"] == UNDO_GONE
        assert await active(b) == before
