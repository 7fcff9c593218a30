"""Consolidation while quiet on Slack (issue 37): ``/memory`` says what last night's tidy
did and ``/memory undo`` puts it back; the Home tab says it with an *Undo* button, for its
owner only. The real bot against the fake Slack and the fake Anthropic API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bots.slack_bot import home
from bots.slack_bot.app import RunningSlackBot
from core.memory.consolidation import Consolidator, UserNight, Window
from core.types import utcnow
from tests.bots.slack_bot.test_slack_home import click_view, open_home, texts, view_buttons
from tests.cleanup_helpers import DARK, MERGED, planner, seed
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack
from tests.slack_helpers import command, key


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(responder=planner) as fake:
        yield fake


async def run_tidy(bot: RunningSlackBot) -> UserNight:
    """Tonight's consolidation of the one user the store holds."""
    rt = bot.runtime
    now = utcnow()
    night = Consolidator(
        store=rt.store,
        cleaner=rt.cleaner,
        enabled=True,
        window=Window.parse("00:00-00:00"),
        daily_tokens=10**9,
        min_memories=2,
        clock=lambda: now,
    )
    report = await night.run_night()
    assert report is not None
    (user,) = report.users
    return user


async def tidy_night(bot: RunningSlackBot) -> str:
    user = await run_tidy(bot)
    assert user.change_id is not None and user.tidied == 4
    return user.change_id


async def test_memory_says_last_nights_tidy_and_undoes_it(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    assert "Tidied" not in (await command(slack, bot, "/memory", user="U1"))["text"]
    assert "nothing to undo" in (await command(slack, bot, "/memory", "undo", user="U1"))["text"]
    await seed(bot.runtime.store, key("U1"))
    await tidy_night(bot)
    said = (await command(slack, bot, "/memory", user="U1"))["text"]
    assert "Tidied 4 memories last night — `/memory undo` puts them back." in said
    assert "Tidied" not in (await command(slack, bot, "/memory", user="U2"))["text"]
    assert "nothing to undo" in (await command(slack, bot, "/memory", "undo", user="U2"))["text"]
    undone = (await command(slack, bot, "/memory", "UNDO", user="U1"))["text"]
    assert undone == "Put back 4 memories as they were before last night's tidy."
    texts_now = {m.text for m in await bot.runtime.store.list_memories(user_key=key("U1"))}
    assert set(DARK) <= texts_now and MERGED not in texts_now
    assert "Tidied" not in (await command(slack, bot, "/memory", user="U1"))["text"]


async def test_home_tab_lists_the_tidy_with_an_undo_for_its_owner(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    await seed(bot.runtime.store, key("U1"))
    change = await tidy_night(bot)
    view = await open_home(slack, bot, "U1")
    assert "Tidied 4 memories last night." in texts(view)
    assert ("Undo", home.UNDO_TIDY, change) in view_buttons(view)
    assert "Tidied" not in texts(await open_home(slack, bot, "U2"))
    # Another user's forged click on U1's view changes nothing; a forged id is refused.
    await click_view(slack, bot, view, home.UNDO_TIDY, change, user="U2")
    assert await bot.runtime.store.count(user_key=key("U1")) == 3
    await click_view(slack, bot, view, home.UNDO_TIDY, "0123456789ab", user="U1")
    assert await bot.runtime.store.count(user_key=key("U1")) == 3
    assert "not a change of mine" in texts(slack.home_views["U1"])
    await click_view(slack, bot, view, home.UNDO_TIDY, change, user="U1")
    after = slack.home_views["U1"]
    assert "Put back 4 memories" in texts(after) and "Tidied" not in texts(after)
    assert await bot.runtime.store.count(user_key=key("U1")) == 6
    # a replayed click: already undone, said so
    await click_view(slack, bot, view, home.UNDO_TIDY, change, user="U1")
    assert "already undone" in texts(slack.home_views["U1"])


async def test_memory_and_home_count_the_dated_facts_the_night_ended(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    """A trip stored before memories had dates: the night dates it and tells it as past."""
    from datetime import timedelta

    from core.types import NewMemory

    await seed(bot.runtime.store, key("U1"))
    trip = NewMemory(
        text="The user is travelling to Singapore next week.",
        source="reflection",
        created_at=utcnow() - timedelta(days=40),
    )
    await bot.runtime.store.add_many(user_key=key("U1"), memories=[trip], dedupe=None)
    user = await run_tidy(bot)
    assert (user.tidied, user.dated) == (5, 1)
    said = (await command(slack, bot, "/memory", user="U1"))["text"]
    assert "Tidied 5 memories last night (one of them a dated fact given its end)" in said
    view = await open_home(slack, bot, "U1")
    assert "Tidied 5 memories last night (one of them a dated fact given its end)." in texts(view)
