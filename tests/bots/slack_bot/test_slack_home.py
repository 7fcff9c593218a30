"""The App Home memory page and the Messages tab, the real bot against the fake Slack
(HTTP and Socket Mode), and the team-id rule of user keys (Slack Connect, Enterprise Grid)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack_bot import home
from bots.slack_bot.app import RunningSlackBot
from bots.slack_bot.assistant import RECALL_PROMPT, suggested_prompts
from bots.slack_bot.events import DM_NOTICE
from core.memory import replies
from core.memory.refs import STALE_BUTTON, created_stamp, parse_memory_ref
from core.types import Memory
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_server import BotIdentity, FakeSlack, JsonDict, running_fake_slack
from tests.loop_helpers import memories_reply
from tests.slack_helpers import (
    PREFERENCE,
    bot_posts,
    command,
    key,
    running_bot,
    settle,
    slack_settings,
)

PRIVACY_LINE = DM_NOTICE.strip()


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as fake:
        yield fake


def texts(view: JsonDict) -> str:
    """Every text of a view, one line a block."""
    out = []
    for block in view["blocks"]:
        text = block.get("text")
        if isinstance(text, dict):
            out.append(str(text.get("text")))
        for element in block.get("elements", []):
            if isinstance(element.get("text"), str):
                out.append(element["text"])
    return "\n".join(out)


def forget_all_value(view: JsonDict) -> str:
    """The value (the single-use token) of a view's *Forget everything* button."""
    [value] = [v for _, a, v in view_buttons(view) if a == home.FORGET_ALL]
    return value


def view_buttons(view: JsonDict) -> list[tuple[str, str, str]]:
    """(label, action_id, value) of every button of a view."""
    found = []
    for block in view["blocks"]:
        elements = block.get("elements", []) + (
            [block["accessory"]] if "accessory" in block else []
        )
        found += [
            (e["text"]["text"], e["action_id"], e["value"])
            for e in elements
            if e.get("type") == "button"
        ]
    return found


def forget_ids(view: JsonDict) -> list[int]:
    """The memory ids the *Forget* buttons of a view name, in order."""
    refs = [parse_memory_ref(v) for _, a, v in view_buttons(view) if a == home.FORGET]
    assert all(r is not None for r in refs), refs
    return [r.memory_id for r in refs if r is not None]


def forget_value(view: JsonDict, memory_id: int) -> str:
    """The value of the *Forget* button of memory ``memory_id`` in a view."""
    [value] = [
        v
        for _, a, v in view_buttons(view)
        if a == home.FORGET and (ref := parse_memory_ref(v)) and ref.memory_id == memory_id
    ]
    return value


async def open_home(slack: FakeSlack, running: RunningSlackBot, user: str) -> JsonDict:
    published = len(slack.calls("views.publish"))
    event = slack.events.app_home_opened(user=user, tab="home")
    sent = await slack.send_event(running.events_url, event)
    assert sent.status == 200
    await slack.wait_until(
        lambda: len(slack.calls("views.publish")) > published, what="views.publish"
    )
    await settle(running)
    return slack.home_views[user]


async def click_view(
    slack: FakeSlack,
    running: RunningSlackBot,
    view: JsonDict,
    action_id: str,
    value: str = "",
    **kw: Any,
) -> JsonDict:
    """Click in ``view``; returns the payload sent. Waits until the bot has finished."""
    payload = slack.events.view_action(view, action_id, value, **kw)
    sent = await slack.send_interaction(running.events_url, payload)
    assert sent.status == 200
    await settle(running)
    return payload


async def seed(running: RunningSlackBot, user: str, count: int) -> None:
    for n in range(count):
        await running.runtime.service.remember(
            user_key=key(user), text=f"The user keeps note number {n} about topic{n}."
        )


async def test_home_tab_shows_the_owners_memory_only_and_refreshes_after_learning(
    slack: FakeSlack, claude: FakeAnthropic, bot: RunningSlackBot
) -> None:
    await seed(bot, "U1", 12)
    await bot.runtime.service.remember(user_key=key("U2"), text="The user has a secret <!channel>.")
    view = await open_home(slack, bot, "U1")
    assert slack.calls("views.publish")[-1].params["user_id"] == "U1"
    shown = texts(view)
    assert "*12 memories*: 12 facts" in shown
    assert "secret" not in shown  # nobody else's
    assert forget_ids(view) == list(range(12, 2, -1))  # newest ten
    assert ("Older ▶", home.PAGE, "10") in view_buttons(view)
    assert ("Pause learning", home.MODE, "paused") in view_buttons(view)
    assert len(view["blocks"]) <= 100
    assert json.loads(view["private_metadata"])["owner"] == "U1"

    # A reflection that learns something refreshes it.
    claude.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
    await slack.send_event(bot.events_url, slack.events.message("I like bullets", user="U1"))
    await slack.wait_until(
        lambda: PREFERENCE in texts(slack.home_views["U1"]), what="home refresh after learning"
    )
    assert "13 memories" in texts(slack.home_views["U1"])
    # A mention of another user's memory in their own page is inert (escaped).
    other = await open_home(slack, bot, "U2")
    assert "&lt;!channel&gt;" in texts(other) and "<!channel>" not in texts(other)


async def test_forget_click_works_for_the_owner_only_and_pages(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    await seed(bot, "U1", 12)
    view = await open_home(slack, bot, "U1")
    published = len(slack.calls("views.publish"))
    twelve = forget_value(view, 12)

    # Someone else's forged click on U1's view: refused, nothing forgotten, nothing shown.
    await click_view(slack, bot, view, home.FORGET, twelve, user="U2")
    assert await bot.runtime.service.count(user_key=key("U1")) == 12
    assert len(slack.calls("views.publish")) == published
    # A forged view naming the clicker as owner still reaches only the clicker's memories.
    forged = dict(view) | {"private_metadata": home.HomeState(owner="U2").metadata()}
    await click_view(slack, bot, forged, home.FORGET, twelve, user="U2")
    assert await bot.runtime.service.count(user_key=key("U1")) == 12
    assert "already gone" in texts(slack.home_views["U2"])
    # Malformed metadata: refused.
    await click_view(
        slack, bot, dict(view) | {"private_metadata": "{nope"}, home.FORGET, twelve, user="U1"
    )
    assert await bot.runtime.service.count(user_key=key("U1")) == 12

    await click_view(slack, bot, view, home.FORGET, twelve, user="U1")
    assert await bot.runtime.service.count(user_key=key("U1")) == 11
    after = slack.home_views["U1"]
    assert "Forgot `#12`." in texts(after) and "11 memories" in texts(after)
    assert "`#12` The user" not in texts(after)  # the notice names it; the list does not

    await click_view(slack, bot, after, home.PAGE, "10", user="U1")
    page2 = slack.home_views["U1"]
    assert forget_ids(page2) == [1]
    assert ("◀ Newer", home.PAGE, "0") in view_buttons(page2)
    assert not [b for b in view_buttons(page2) if b[0] == "Older ▶"]
    await click_view(slack, bot, page2, home.PAGE, "99999999999999", user="U1")  # bad offset
    assert json.loads(slack.home_views["U1"]["private_metadata"])["offset"] == 10


async def test_a_stale_home_forget_button_forgets_nothing_and_says_so(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    # A page open on another device: its Forget of #1 was made for a memory forgotten since.
    await seed(bot, "U1", 1)
    old_page = await open_home(slack, bot, "U1")
    old_value = forget_value(old_page, 1)
    await command(slack, bot, "/forget", "1", user="U1")
    await command(slack, bot, "/remember", "The user drinks green tea.", user="U1")
    await click_view(slack, bot, old_page, home.FORGET, old_value, user="U1")
    assert "That memory was already gone." in texts(slack.home_views["U1"])
    # A page published before refs carried bare ids: refused, whatever #2 is now.
    await click_view(slack, bot, old_page, home.FORGET, "2", user="U1")
    assert STALE_BUTTON in texts(slack.home_views["U1"])
    (tea,) = await bot.runtime.service.list_memories(user_key=key("U1"))
    restored = f"{tea.id}.{created_stamp(tea.created_at) - 1}"  # same id, another memory
    await click_view(slack, bot, old_page, home.FORGET, restored, user="U1")
    assert STALE_BUTTON in texts(slack.home_views["U1"])
    assert await bot.runtime.service.count(user_key=key("U1")) == 1
    page = slack.home_views["U1"]
    await click_view(slack, bot, page, home.FORGET, forget_value(page, tea.id), user="U1")
    assert await bot.runtime.service.count(user_key=key("U1")) == 0


async def test_search_mode_export_and_single_use_forget_everything(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    await seed(bot, "U1", 3)
    view = await open_home(slack, bot, "U1")
    await click_view(
        slack,
        bot,
        view,
        home.SEARCH,
        "topic1 \x00 " + "ü" * 500,
        user="U1",
        action_type="plain_text_input",
    )
    found = slack.home_views["U1"]
    assert forget_ids(found) == [2]
    assert len(json.loads(found["private_metadata"])["query"]) <= home.MAX_QUERY_CHARS
    await click_view(slack, bot, found, home.SEARCH, 'AND "(* -x', user="U1")  # query syntax
    assert "Nothing matches." in texts(slack.home_views["U1"])

    await click_view(slack, bot, view, home.MODE, "paused", user="U1")
    assert await bot.runtime.store.get_mode(user_key=key("U1")) == "paused"
    paused = slack.home_views["U1"]
    assert ("Resume learning", home.MODE, "on") in view_buttons(paused)
    assert texts(paused).count("Memory is paused") == 1
    await click_view(slack, bot, paused, home.MODE, "off", user="U1")
    assert ("Turn memory on", home.MODE, "on") in view_buttons(slack.home_views["U1"])
    await click_view(slack, bot, paused, home.MODE, "sideways", user="U1")  # not a mode
    assert await bot.runtime.store.get_mode(user_key=key("U1")) == "off"

    await click_view(slack, bot, view, home.EXPORT, "jsonl", user="U1")
    assert len(slack.files) == 1
    assert "Sent 3 memories to our DM." in texts(slack.home_views["U1"])

    latest = slack.home_views["U1"]
    confirm = [b for b in latest["blocks"] if b["type"] == "actions"][1]["elements"][1]
    assert confirm["action_id"] == home.FORGET_ALL and confirm["confirm"]["style"] == "danger"
    # The button's value is a store token, replaced at each publish: the first page's is gone.
    first = forget_all_value(view)
    assert first != confirm["value"]
    await click_view(slack, bot, latest, home.FORGET_ALL, first, user="U1")
    assert await bot.runtime.service.count(user_key=key("U1")) == 3
    assert replies.HOME_CONFIRM_GONE in texts(slack.home_views["U1"])
    for forged in ("", "confirm", "x" * 5000, "\x00", "' OR 1=1 --"):
        await click_view(slack, bot, latest, home.FORGET_ALL, forged, user="U1")
    assert await bot.runtime.service.count(user_key=key("U1")) == 3

    latest = slack.home_views["U1"]
    payload = await click_view(
        slack, bot, latest, home.FORGET_ALL, forget_all_value(latest), user="U1"
    )
    assert await bot.runtime.service.count(user_key=key("U1")) == 0
    await bot.runtime.service.remember(user_key=key("U1"), text="The user added this later.")
    replay = await slack.send_interaction(bot.events_url, payload)  # the same signed click
    assert replay.status == 200
    await settle(bot)
    assert await bot.runtime.service.count(user_key=key("U1")) == 1
    assert replies.HOME_CONFIRM_GONE in texts(slack.home_views["U1"])


async def test_home_forget_all_token_is_the_owners_and_apart_from_the_chats(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    await seed(bot, "U1", 2)
    await seed(bot, "U2", 2)
    u1_page = await open_home(slack, bot, "U1")
    await open_home(slack, bot, "U2")
    # U2 replays U1's token in a click of their own: refused, and U1's token still works.
    await click_view(
        slack, bot, slack.home_views["U2"], home.FORGET_ALL, forget_all_value(u1_page), user="U2"
    )
    assert await bot.runtime.service.count(user_key=key("U2")) == 2
    # A chat confirmation made meanwhile does not replace the page's token.
    chat_token = await bot.runtime.service.confirm_forget_all(user_key=key("U1"))
    assert chat_token != forget_all_value(u1_page)
    await click_view(slack, bot, u1_page, home.FORGET_ALL, forget_all_value(u1_page), user="U1")
    assert await bot.runtime.service.count(user_key=key("U1")) == 0
    assert await bot.runtime.service.count(user_key=key("U2")) == 2


async def test_home_refreshes_after_a_command(slack: FakeSlack, bot: RunningSlackBot) -> None:
    await open_home(slack, bot, "U1")
    await command(slack, bot, "/remember", "The user drinks green tea.", user="U1")
    await slack.wait_until(
        lambda: "green tea" in texts(slack.home_views["U1"]), what="home refresh after /remember"
    )
    await command(slack, bot, "/memory", "pause", user="U1")
    await settle(bot)
    assert "Memory is paused" in texts(slack.home_views["U1"])


async def test_a_failing_views_publish_is_logged_not_raised(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    slack.fail_next("views.publish", error="internal_error")
    event = slack.events.app_home_opened(user="U1", tab="home")
    assert (await slack.send_event(bot.events_url, event)).status == 200
    await slack.wait_until(lambda: bool(slack.calls("views.publish")), what="views.publish")
    await settle(bot)
    assert "U1" not in slack.home_views
    assert (
        await slack.send_event(bot.events_url, slack.events.app_home_opened(user="U1"))
    ).status == 200
    await slack.wait_until(lambda: "U1" in slack.home_views, what="second publish")


async def test_messages_tab_greets_once_and_suggests_prompts_over_socket_mode(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    async with running_bot(settings, http=False) as running:
        await slack.wait_for_socket()
        await running.runtime.service.remember(
            user_key=key("U1"),
            text="The user is building a Rust parser for the billing project.",
            kind="context",
        )
        await running.runtime.service.remember(
            user_key=key("U1"), text=PREFERENCE, kind="preference"
        )
        for _ in range(2):
            await slack.deliver_socket_event(
                slack.events.app_home_opened(user="U1", tab="messages")
            )
            await settle(running)
        greetings = bot_posts(slack, "D1")
        assert len(greetings) == 1 and PRIVACY_LINE in greetings[0]["markdown_text"]
        assert len(slack.prompts) == 2
        prompts = slack.prompts[-1]
        assert prompts["channel_id"] == "D1" and "thread_ts" not in prompts
        titles = [p["title"] for p in prompts["prompts"]]
        assert titles[0] == RECALL_PROMPT["title"] and len(titles) == 4
        assert "Rust parser" in prompts["prompts"][1]["message"]

        # Someone the bot knows nothing about: generic prompts.
        await slack.deliver_socket_event(slack.events.app_home_opened(user="U9", tab="messages"))
        await settle(running)
        assert RECALL_PROMPT["title"] not in [p["title"] for p in slack.prompts[-1]["prompts"]]

        # The first DM after the greeting carries no second privacy line; the status says
        # what is happening while it recalls and thinks.
        await slack.deliver_socket_event(slack.events.message("hello", user="U1"))
        await slack.wait_until(lambda: len(bot_posts(slack, "D1")) == 2, what="answer")
        await settle(running)
        assert PRIVACY_LINE not in str(bot_posts(slack, "D1")[1])
        shown = [s for s in slack.statuses if s.get("status")]
        assert shown and shown[0]["loading_messages"][0] == "Recalling what you told me…"

        # The split-pane assistant view (legacy ``assistant_view``, whose manifest
        # subscribes to assistant_thread_started): a new thread gets prompts in that thread.
        slack.bot_events.add("assistant_thread_started")
        started = slack.events.assistant_thread_started(user="U1")
        await slack.deliver_socket_event(started)
        await settle(running)
        sent = slack.calls("assistant.threads.setSuggestedPrompts")[-1].params
        assert sent["thread_ts"] == started["assistant_thread"]["thread_ts"]


def test_suggested_prompts_are_at_most_four_and_generic_for_a_stranger() -> None:
    assert len(suggested_prompts([])) == 4
    assert RECALL_PROMPT not in suggested_prompts([])
    now = __import__("datetime").datetime.now(__import__("datetime").UTC)
    many = [
        Memory(
            id=n,
            user_key="k",
            text="x" * 199,
            kind="context",
            category="code",
            origin="private",
            source="remember",
            created_at=now,
            updated_at=now,
        )
        for n in range(50)
    ]
    prompts = suggested_prompts(many)
    assert len(prompts) == 4 and all(len(p["message"]) <= 300 for p in prompts)


async def test_fake_views_publish_enforces_the_documented_limits(slack: FakeSlack) -> None:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "x"}}
    ok = await client.views_publish(user_id="U1", view={"type": "home", "blocks": [section] * 100})
    assert ok["view"]["id"]
    for view, error in (
        ({"type": "home", "blocks": [section] * 101}, "invalid_blocks"),
        ({"type": "modal", "blocks": [section]}, "invalid_arguments"),
        (
            {"type": "home", "blocks": [section], "private_metadata": "x" * 3001},
            "invalid_arguments",
        ),
    ):
        with pytest.raises(SlackApiError) as raised:
            await client.views_publish(user_id="U1", view=view)
        assert raised.value.response["error"] == error
    with pytest.raises(SlackApiError):
        await client.assistant_threads_setSuggestedPrompts(
            channel_id="D1", prompts=[{"title": "a", "message": "a"}] * 5
        )
    one = [{"title": "a", "message": "a"}]
    dropped = await client.assistant_threads_setSuggestedPrompts(
        channel_id="D1", thread_ts="1.000001", prompts=one
    )
    assert dropped["ok"] and slack.prompts == []  # an agent app's call with thread_ts: ignored
    await client.assistant_threads_setSuggestedPrompts(channel_id="D1", prompts=one)
    assert slack.prompts[0]["prompts"] == one


# --- the team-id rule


async def test_slack_connect_user_has_one_key_on_every_entry_point(
    slack: FakeSlack, claude: FakeAnthropic, bot: RunningSlackBot
) -> None:
    """An external user (their own team T0EXTERNAL) in a shared channel: the event envelope
    carries the host's team, the command and the button the external team; one key."""
    ext = "U0EXT"
    mention = slack.events.app_mention(f"{slack.identity.mention} I like bullets", user=ext)
    mention |= {"user_team": "T0EXTERNAL", "source_team": "T0EXTERNAL"}
    claude.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
    await slack.send_event(bot.events_url, mention)
    await slack.wait_until(lambda: bool(slack.ephemerals), what="memory note")
    assert bot.runtime.reflector is not None and await bot.runtime.reflector.drain(5)
    assert await bot.runtime.service.count(user_key=key(ext)) == 1

    off = await command(slack, bot, "/memory", "off", user=ext, team_id="T0EXTERNAL")
    assert off["text"].startswith("Memory is off")
    assert await bot.runtime.store.get_mode(user_key=key(ext)) == "off"
    again = slack.events.app_mention(f"{slack.identity.mention} more", user=ext)
    await slack.send_event(bot.events_url, again | {"user_team": "T0EXTERNAL"})
    await slack.wait_until(
        lambda: len(bot_posts(slack, "C0GENERAL", again["ts"])) > 0, what="answer"
    )
    await settle(bot)
    assert len(claude.requests_of("extract")) == 1  # off stopped the learning

    view = await open_home(slack, bot, ext)
    await click_view(
        slack, bot, view, home.FORGET, forget_value(view, 1), user=ext, user_team="T0EXTERNAL"
    )
    assert await bot.runtime.service.count(user_key=key(ext)) == 0  # the button reached it


async def test_enterprise_grid_org_install_keys_by_enterprise(
    claude: FakeAnthropic, tmp_path: Path
) -> None:
    """An org-wide Grid install: the same person writing from two workspaces of the org is one
    key ``slack:{enterprise_id}:{user}``; a command and a Home click reach the same memory."""
    identity = BotIdentity(team_id="T0WS1", enterprise_id="E0ORG", org_install=True)
    async with running_fake_slack(identity=identity) as fake:
        settings = slack_settings(fake, claude, tmp_path / "m.db")
        async with running_bot(settings) as running:
            await command(
                fake, running, "/remember", "The user works in two workspaces.", user="W1"
            )
            elsewhere = fake.events.message("hi", user="W1")
            envelope = fake.events.event_callback(elsewhere) | {"team_id": "T0WS2"}
            await fake.send_event(running.events_url, envelope)
            await fake.wait_until(lambda: bool(bot_posts(fake, "D1")), what="answer")
            await settle(running)
            grid = "slack:E0ORG:W1"
            assert await running.runtime.service.count(user_key=grid) == 1
            turns = await running.runtime.store.recent_turns(
                conversation_key="slack:E0ORG:D1",
                limit=5,  # the install's id, as the user key
            )
            assert {t.user_key for t in turns if t.role == "user"} == {grid}
            view = await open_home(fake, running, "W1")
            one = forget_value(view, 1)
            await click_view(fake, running, view, home.FORGET, one, user="W1", user_team="T0WS2")
            assert await running.runtime.service.count(user_key=grid) == 0


async def test_home_tab_and_a_forget_click_over_socket_mode(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    async with running_bot(settings, http=False) as running:
        await slack.wait_for_socket()
        await seed(running, "U1", 2)
        await slack.deliver_socket_event(slack.events.app_home_opened(user="U1", tab="home"))
        await slack.wait_until(lambda: "U1" in slack.home_views, what="views.publish")
        view = slack.home_views["U1"]
        stranger = slack.events.view_action(view, home.FORGET, forget_value(view, 2), user="U2")
        await slack.wait_for_ack(await slack.push_envelope("interactive", stranger))
        await settle(running)
        assert await running.runtime.service.count(user_key=key("U1")) == 2
        owner = slack.events.view_action(view, home.FORGET, forget_value(view, 2), user="U1")
        await slack.wait_for_ack(await slack.push_envelope("interactive", owner))
        await settle(running)
        assert await running.runtime.service.count(user_key=key("U1")) == 1
        assert "Forgot `#2`." in texts(slack.home_views["U1"])


async def test_messages_tab_over_http_greets_once(slack: FakeSlack, bot: RunningSlackBot) -> None:
    for _ in range(2):
        event = slack.events.app_home_opened(user="U3", tab="messages")
        assert (await slack.send_event(bot.events_url, event)).status == 200
        await settle(bot)
    assert [PRIVACY_LINE in m["markdown_text"] for m in bot_posts(slack, "D3")] == [True]
    assert len(slack.prompts) == 2 and slack.prompts[0]["title"] == "Try asking"
    # The prompts are cosmetic: Slack refusing them is logged, and the tab still works.
    slack.fail_next("assistant.threads.setSuggestedPrompts", error="not_allowed")
    event = slack.events.app_home_opened(user="U3", tab="messages")
    assert (await slack.send_event(bot.events_url, event)).status == 200
    await settle(bot)
    assert len(slack.prompts) == 2
