"""Slash commands, their buttons and the "I'll remember" notes, over signed HTTP requests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.slack_bot.app import RunningSlackBot
from core.memory.refs import STALE_BUTTON, created_stamp, memory_ref, parse_memory_ref
from core.memory.service import CONFIRM_GONE
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, JsonDict
from tests.loop_helpers import memories_reply, memory_lines
from tests.slack_helpers import (
    PREFERENCE,
    TEAM,
    bot_posts,
    buttons,
    click,
    command,
    key,
    running_bot,
    settle,
    slack_settings,
    system_text,
)


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as fake:
        yield fake


async def test_remember_says_so_or_that_it_knew(slack: FakeSlack, bot: RunningSlackBot) -> None:
    reply = await command(slack, bot, "/remember", "The user drinks green tea.", user="U1")
    assert reply["text"] == "Remembered (`#1`): The user drinks green tea."
    again = await command(slack, bot, "/remember", "the user drinks green tea", user="U1")
    assert again["text"] == "I already knew that (`#1`)."
    in_dm = await command(slack, bot, "/remember", "The user runs Arch.", user="U1", channel="D1")
    assert in_dm["text"] == "Remembered (`#2`): The user runs Arch."
    empty = await command(slack, bot, "/remember", "   ", user="U1")
    assert empty["text"] == "A memory needs some text."
    memories = await bot.runtime.service.list_memories(user_key=key("U1"))
    assert [(m.text, m.origin) for m in memories] == [
        ("The user runs Arch.", "private"),
        ("The user drinks green tea.", "shared"),
    ]
    assert slack.calls("chat.postMessage") == []  # nothing said in the channel


async def test_remember_shows_the_stored_text_with_mentions_inert(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    typed = "<!channel> and <@U2> read <https://evil.example|the docs> & deploy"
    reply = await command(slack, bot, "/remember", typed, user="U1")
    assert reply["text"] == (
        "Remembered (`#1`): &lt;!channel&gt; and &lt;@U2&gt; read"
        " &lt;https://evil.example|the docs&gt; &amp; deploy"
    )
    (memory,) = await bot.runtime.service.list_memories(user_key=key("U1"))
    assert memory.text == typed  # stored as typed; only the reply escapes it


async def test_remember_refuses_a_secret_and_stores_nothing(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    token = "xoxb-123456789012-1234567890123-" + "q8w7e6r5t4y3u2i1o0p9a8s7"
    reply = await command(slack, bot, "/remember", f"The deploy token is {token}", user="U1")
    assert reply["text"] == (
        "That looks like a Slack token, and secrets are never stored as memories, "
        "so nothing was remembered."
    )
    assert token not in json.dumps(reply)
    again = await command(slack, bot, "/remember", "my password is hunter2", user="U1")
    assert again["text"].startswith("That looks like a password,")
    assert await bot.runtime.service.count(user_key=key("U1")) == 0
    assert slack.calls("chat.postMessage") == []


async def test_forget_only_the_callers_own(slack: FakeSlack, bot: RunningSlackBot) -> None:
    await command(slack, bot, "/remember", "The user drinks green tea.", user="U1")
    theirs = await command(slack, bot, "/forget", "1", user="U2")
    assert theirs["text"] == "No such memory."
    assert await bot.runtime.service.count(user_key=key("U1")) == 1
    usage = await command(slack, bot, "/forget", "tea", user="U1")
    assert usage["text"].startswith("Usage: `/forget ID`")
    mine = await command(slack, bot, "/forget", "#1", user="U1")
    assert mine["text"] == "Forgot `#1`."
    assert await bot.runtime.service.count(user_key=key("U1")) == 0


async def test_forget_all_asks_first_and_erases_only_the_clicker(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    for text in ("The user drinks green tea.", "The user runs Arch."):
        await command(slack, bot, "/remember", text, user="U1")
    await command(slack, bot, "/remember", "The user likes Go.", user="U2")
    ask = await command(slack, bot, "/forget", "all", user="U1")
    assert "Forget all 2" in ask["blocks"][0]["text"]["text"]
    [(confirm_id, token), cancel_button] = buttons(ask)
    assert confirm_id == "selfmind_forget_all" and len(token) >= 16  # a one-time token
    assert cancel_button == ("selfmind_forget_all_cancel", "cancel")
    assert await bot.runtime.service.count(user_key=key("U1")) == 2  # nothing yet

    cancel = await click(slack, bot, "selfmind_forget_all_cancel", "cancel", user="U1")
    assert (cancel["text"], cancel["replace_original"]) == ("Nothing was forgotten.", True)
    other = await click(slack, bot, "selfmind_forget_all", token, user="U2")
    assert other["text"] == CONFIRM_GONE  # U1's confirmation is not U2's
    assert await bot.runtime.service.count(user_key=key("U2")) == 1
    assert await bot.runtime.service.count(user_key=key("U1")) == 2
    done = await click(slack, bot, "selfmind_forget_all", token, user="U1")
    assert done["text"] == "Forgot all 2 memories and our conversation history."
    assert await bot.runtime.service.count(user_key=key("U1")) == 0


async def test_a_replayed_forget_everything_click_forgets_nothing_more(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    """A captured, signed *Forget everything* click sent again within Slack's 5-minute
    window finds its one-time token used: memories added since the click stay."""
    await command(slack, bot, "/remember", "The user drinks green tea.", user="U1")
    ask = await command(slack, bot, "/forget", "all", user="U1")
    [(action_id, token), _] = buttons(ask)
    payload = slack.events.block_actions(action_id, token, user="U1")
    payload["user"]["team_id"] = TEAM
    first = await slack.send_interaction(bot.events_url, payload)
    assert first.status == 200
    done = await slack.wait_for_response(payload["response_url"])
    assert done["text"] == "Forgot all 1 memory and our conversation history."
    await command(slack, bot, "/remember", "The user runs Arch.", user="U1")

    replayed = await slack.send_interaction(bot.events_url, payload)  # the same signed body
    assert replayed.status == 200
    await slack.wait_until(
        lambda: len(slack.responses(payload["response_url"])) == 2, what="second response"
    )
    assert slack.responses(payload["response_url"])[1]["text"] == CONFIRM_GONE
    memories = await bot.runtime.service.list_memories(user_key=key("U1"))
    assert [m.text for m in memories] == ["The user runs Arch."]


def memory_sections(reply: dict[str, Any]) -> str:
    """The memory lines of a listing: one section block per memory."""
    return "\n".join(
        b["text"]["text"]
        for b in reply["blocks"]
        if b.get("type") == "section" and "`#" in b["text"]["text"]
    )


async def test_memories_pages_search_and_export_to_the_dm(
    slack: FakeSlack, bot: RunningSlackBot
) -> None:
    service = bot.runtime.service
    for i in range(12):
        await service.remember(user_key=key("U1"), text=f"The user owns project number {i}.")
    await service.remember(user_key=key("U2"), text="The user keeps a secret diary.")

    first = await command(slack, bot, "/memories", user="U1")
    listing = memory_sections(first)
    ids = [int(line.split("`#")[1].split("`")[0]) for line in listing.splitlines()]
    assert ids == list(range(12, 2, -1))  # newest first, 10 a page
    footer = first["blocks"][-1]["elements"][0]["text"]
    assert f"Your memory key is `{key('U1')}`." in footer and key("U2") not in str(first)
    assert all(len(b["text"]["text"]) <= 3000 for b in first["blocks"] if b["type"] == "section")
    assert "1–10 of 12" in first["blocks"][0]["text"]["text"]
    assert buttons(first) == [("selfmind_memories_page", "10")]
    second = await click(slack, bot, "selfmind_memories_page", "10", user="U1")
    assert second["replace_original"] is True
    assert "`#2` The user owns project number 1." in memory_sections(second)
    assert buttons(second) == [("selfmind_memories_page", "0")]
    assert "diary" not in json.dumps([first, second])

    found = await command(slack, bot, "/memories", "search project number 7", user="U1")
    assert "`#8` The user owns project number 7." in found["text"]
    nothing = await command(slack, bot, "/memories", "search diary", user="U1")
    assert nothing["text"] == "None of your memories match."
    empty = await command(slack, bot, "/memories", user="U3")
    assert empty["text"] == (
        f"I don't remember anything about you yet. Your memory key is `{key('U3')}`."
    )

    exported = await command(slack, bot, "/memories", "export", user="U1")
    assert exported["text"] == "I sent your 12 memories to our DM as a JSON Lines file."
    (upload,) = slack.files.values()
    assert upload.completed and upload.channels == ["D1"]
    assert upload.filename.endswith(".jsonl") and upload.content is not None
    rows = [json.loads(line) for line in upload.content.decode().splitlines()]
    assert [r["text"] for r in rows] == [f"The user owns project number {i}." for i in range(12)]
    assert slack.messages("C0GENERAL") == []  # no listing where others could see it


async def test_memory_pause_and_off_skip_the_reflection_call(
    slack: FakeSlack, claude: FakeAnthropic, bot: RunningSlackBot
) -> None:
    await bot.runtime.service.remember(user_key=key("U1"), text=PREFERENCE)
    question = "How should answers look for me?"

    async def dm(text: str) -> None:
        before = len(bot_posts(slack, "D1"))
        await slack.send_event(bot.events_url, slack.events.message(text, user="U1"))
        await slack.wait_until(lambda: len(bot_posts(slack, "D1")) > before, what="answer")
        await settle(bot)
        assert bot.runtime.reflector is not None
        assert await bot.runtime.reflector.drain(5)

    paused = await command(slack, bot, "/memory", "pause", user="U1")
    assert paused["text"].startswith("Memory is paused")
    await dm(question)
    assert PREFERENCE in system_text(claude)  # still recalls
    assert claude.requests_of("extract") == []  # learns nothing: no call at all

    off = await command(slack, bot, "/memory", "off", user="U1")
    assert off["text"].startswith("Memory is off")
    await dm(question)
    assert memory_lines(system_text(claude)) == []  # no recall either
    assert claude.requests_of("extract") == []
    status = await command(slack, bot, "/memory", user="U1")
    assert status["text"].startswith("Memory is off") and "Usage" in status["text"]

    resumed = await command(slack, bot, "/memory", "on", user="U1")
    assert resumed["text"].startswith("Memory is on")
    await dm(question)
    assert PREFERENCE in system_text(claude)
    assert len(claude.requests_of("extract")) == 1
    bogus = await command(slack, bot, "/memory", "sometimes", user="U1")
    assert bogus["text"] == "Usage: `/memory pause | resume | off | on`."


async def learn_with_a_note(
    slack: FakeSlack, claude: FakeAnthropic, bot: RunningSlackBot
) -> tuple[JsonDict, JsonDict]:
    """U1 mentions the bot and a reflection learns :data:`PREFERENCE`: the mention and the
    "I'll remember" note it posts."""
    claude.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
    mention = slack.events.app_mention(f"{slack.identity.mention} I like bullet points", user="U1")
    await slack.send_event(bot.events_url, mention)
    await slack.wait_until(lambda: bool(slack.ephemerals), what="memory note")
    return mention, slack.ephemerals[0]


async def test_the_forget_button_of_a_note_works_only_for_its_owner(
    slack: FakeSlack, claude: FakeAnthropic, bot: RunningSlackBot
) -> None:
    mention, note = await learn_with_a_note(slack, claude, bot)
    assert (note["channel"], note["to_user"], note["thread_ts"]) == (
        "C0GENERAL",
        "U1",
        mention["ts"],
    )
    [(action, value)] = buttons(note)
    ref = parse_memory_ref(value)
    assert action == "selfmind_forget" and ref is not None and ref.memory_id == 1

    stranger = await click(slack, bot, "selfmind_forget", value, user="U2")
    assert stranger["text"] == "No such memory."
    assert await bot.runtime.service.count(user_key=key("U1")) == 1
    owner = await click(slack, bot, "selfmind_forget", value, user="U1")
    assert owner["text"] == "Forgot `#1`."
    assert await bot.runtime.service.count(user_key=key("U1")) == 0


async def test_notes_can_be_turned_off(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db", slack_memory_notes=False)
    claude.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
    async with running_bot(settings) as running:
        await slack.send_event(running.events_url, slack.events.message("bullets!", user="U1"))
        await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="answer")
        await settle(running)
        assert running.runtime.reflector is not None
        assert await running.runtime.reflector.drain(5)
        assert await running.runtime.service.count(user_key=key("U1")) == 1
    assert slack.ephemerals == []


async def test_a_stale_forget_button_forgets_nothing_and_says_so(
    slack: FakeSlack, claude: FakeAnthropic, bot: RunningSlackBot
) -> None:
    # Issue 26: /remember A (#1), /forget 1, /remember B; the old note's Forget of A must not
    # reach B, nor may a button posted before refs (a bare id) or one whose id now names
    # another memory (a store restored from a backup).
    _, note = await learn_with_a_note(slack, claude, bot)
    [(_, old_value)] = buttons(note)
    assert (await command(slack, bot, "/forget", "1", user="U1"))["text"] == "Forgot `#1`."
    b = await command(slack, bot, "/remember", "The user drinks green tea.", user="U1")
    assert b["text"] == "Remembered (`#2`): The user drinks green tea."  # never #1 again

    gone = await click(slack, bot, "selfmind_forget", old_value, user="U1")
    assert gone["text"] == "No such memory."
    (tea,) = await bot.runtime.service.list_memories(user_key=key("U1"))
    other_memory = f"{tea.id}.{created_stamp(tea.created_at) + 1}"
    for value in (str(tea.id), f"#{tea.id}", other_memory):
        stale = await click(slack, bot, "selfmind_forget", value, user="U1")
        assert stale["text"] == STALE_BUTTON
    for forged in ("", "x" * 5000, "\x00", f"{tea.id}.", f"{tea.id}.1.2"):
        refused = await click(slack, bot, "selfmind_forget", forged, user="U1")
        assert refused["text"] == STALE_BUTTON
    assert await bot.runtime.service.count(user_key=key("U1")) == 1
    ok = await click(slack, bot, "selfmind_forget", memory_ref(tea), user="U1")
    assert ok["text"] == "Forgot `#2`."
    assert await bot.runtime.service.count(user_key=key("U1")) == 0
