"""The Discord adapter end to end: the real discord.py client against the fake Discord
(REST + gateway) and the real Anthropic SDK against the fake Claude, over real sockets."""

from __future__ import annotations

import asyncio
import re

import pytest

from bots.discord_bot.client import FIRST_DM_NOTICE, MEMORY_REACTION
from bots.discord_bot.routing import chain_key, dm_key, thread_key
from core.chat.controls import NOT_ENABLED
from tests.discord_helpers import (
    NO_PINGS,
    World,
    chat_messages,
    eventually,
    last_user_text,
    memory_block,
    running_bot,
    settled,
)
from tests.fakes.anthropic_server import Reply, overloaded
from tests.loop_helpers import memories_reply

pytestmark = pytest.mark.usefixtures("no_errors")


def mention(w: World, text: str) -> str:
    return f"{w.discord.bot_user.mention} {text}"


async def test_guild_mention_is_answered_by_streamed_edits(w: World) -> None:
    answer = "Tea is best brewed at 80 degrees for green tea. " * 6
    w.claude.enqueue(Reply(text=answer, chunk_size=12, chunk_delay_s=0.02), kind="chat")
    async with running_bot(w) as bot:
        asked = await w.discord.dispatch_message(
            w.discord.channel_id, w.alice, mention(w, "how hot should tea water be?")
        )
        await settled(w, bot, chats=1)
        turns = await bot.rt.store.recent_turns(
            conversation_key=chain_key(w.discord.guild_id, w.discord.channel_id, int(asked["id"])),
            limit=10,
        )

    posts = w.discord.find_requests("POST", f"/channels/{w.discord.channel_id}/messages")
    assert len(posts) == 1
    assert str(posts[0].json["message_reference"]["message_id"]) == asked["id"]
    assert posts[0].json["allowed_mentions"] == NO_PINGS
    handle = w.bot_posts(w.discord.channel_id)[0]["id"]
    edits = w.discord.find_requests("PATCH", f"/channels/*/messages/{handle}")
    assert len(edits) >= 2, "the answer should arrive in several edits"
    assert all(e.json["allowed_mentions"] == NO_PINGS for e in edits)
    assert edits[0].json["content"] != edits[-1].json["content"]
    assert w.bot_texts(w.discord.channel_id) == [answer]
    assert w.discord.typing_channel_ids[0] == w.discord.channel_id

    assert last_user_text(w) == f"[<@{w.alice.id}>] how hot should tea water be?"
    assert "This is a Discord server channel." in memory_block(w)
    user, assistant = turns
    assert (user.role, user.user_key, user.origin, user.text, user.platform_ref) == (
        "user",
        f"discord:{w.alice.id}",
        "shared",
        "how hot should tea water be?",
        asked["id"],
    )
    assert (assistant.role, assistant.text) == ("assistant", answer)


async def test_dm_is_answered_privately_with_a_one_time_notice(w: World) -> None:
    dm = w.discord.dm_channel_id(w.alice)
    w.claude.enqueue("Happy to help.", "Still here.", kind="chat")
    async with running_bot(w) as bot:
        await w.discord.dispatch_message(dm, w.alice, "hello, can you help me plan my week?")
        await settled(w, bot, chats=1)
        await w.discord.dispatch_message(dm, w.alice, "thanks!")
        await settled(w, bot, chats=2)
        turns = await bot.rt.store.recent_turns(conversation_key=dm_key(dm), limit=10)

    assert w.bot_texts(dm) == [FIRST_DM_NOTICE, "Happy to help.", "Still here."]
    assert [t.origin for t in turns] == ["private"] * 4
    assert last_user_text(w, 0) == "hello, can you help me plan my week?"  # no [name] in a DM
    assert "This is a Discord DM." in memory_block(w, 0)
    assert chat_messages(w, 1)[:2] == [
        ("user", "hello, can you help me plan my week?"),
        ("assistant", "Happy to help."),
    ]


async def test_reply_chain_is_context_once_and_reflection_sees_only_the_author(
    w: World,
) -> None:
    fake = w.discord
    w.claude.enqueue("Fridays are risky.", "Because nobody is around to fix it.", kind="chat")
    async with running_bot(w) as bot:
        bobs = await fake.dispatch_message(fake.channel_id, w.bob, "We deploy on Fridays at 5pm.")
        alices = await fake.dispatch_message(
            fake.channel_id, w.alice, mention(w, "is that a good idea?"), reply_to=int(bobs["id"])
        )
        await settled(w, bot, chats=1)
        answer_id = int(w.bot_posts(fake.channel_id)[0]["id"])
        # A reply to the bot's answer, without a mention, continues the same conversation.
        await fake.dispatch_message(fake.channel_id, w.alice, "why?", reply_to=answer_id)
        await settled(w, bot, chats=2)
        key = chain_key(fake.guild_id, fake.channel_id, int(bobs["id"]))
        turns = await bot.rt.store.recent_turns(conversation_key=key, limit=20)

    assert chat_messages(w, 0) == [
        (
            "user",
            f"[<@{w.bob.id}>] We deploy on Fridays at 5pm.\n\n"
            f"[<@{w.alice.id}>] is that a good idea?",
        )
    ]
    second = chat_messages(w, 1)
    assert sum("We deploy on Fridays" in text for _, text in second) == 1  # seeded once
    assert ("assistant", "Fridays are risky.") in second
    assert second[-1] == ("user", f"[<@{w.alice.id}>] why?")
    assert [(t.user_key, t.reflection) for t in turns if t.role == "user"] == [
        (f"discord:{w.bob.id}", None),  # context: stored under Bob's key, never reflected
        (f"discord:{w.alice.id}", "done"),
        (f"discord:{w.alice.id}", "done"),
    ]
    assert turns[1].platform_ref == alices["id"]
    for extract in w.claude.requests_of("extract"):
        prompt = str(extract.body["messages"][0]["content"])
        assert "Fridays at 5pm" not in prompt  # Bob's message is nobody's memory source


async def test_thread_the_bot_answers_in_is_followed(w: World) -> None:
    fake = w.discord
    thread = fake.add_thread(fake.channel_id, "planning", owner=w.bob)
    other = fake.add_thread(fake.channel_id, "chatter", owner=w.bob)
    w.claude.enqueue("Sounds like a plan.", "Noted, Bob.", kind="chat")
    async with running_bot(w) as bot:
        await fake.dispatch_message(thread, w.bob, "Let's pick the offsite venue.")
        await fake.dispatch_message(other, w.bob, "unrelated, nobody asked the bot")
        await fake.dispatch_message(thread, w.alice, mention(w, "what do you think?"))
        await settled(w, bot, chats=1)
        await fake.dispatch_message(thread, w.bob, "I vote for the lake house.")
        await settled(w, bot, chats=2)
        turns = await bot.rt.store.recent_turns(
            conversation_key=thread_key(fake.guild_id, thread), limit=20
        )

    assert w.bot_texts(thread) == ["Sounds like a plan.", "Noted, Bob."]
    assert w.bot_texts(other) == []
    assert chat_messages(w, 0) == [
        (
            "user",
            f"[<@{w.bob.id}>] Let's pick the offsite venue.\n\n"
            f"[<@{w.alice.id}>] what do you think?",
        )
    ]
    assert last_user_text(w, 1) == f"[<@{w.bob.id}>] I vote for the lake house."
    assert "This is a Discord server thread." in memory_block(w, 1)
    assert [t.user_key for t in turns if t.role == "user"] == [
        f"discord:{w.bob.id}",
        f"discord:{w.alice.id}",
        f"discord:{w.bob.id}",
    ]


async def test_bots_own_posts_and_unaddressed_messages_are_ignored(w: World) -> None:
    fake = w.discord
    other_bot = fake.add_user("otherbot", bot=True)
    async with running_bot(w) as bot:
        await fake.dispatch_message(fake.channel_id, other_bot, mention(w, "answer me, bot!"))
        await fake.dispatch_message(fake.dm_channel_id(other_bot), other_bot, "a bot's DM")
        await fake.dispatch_message(fake.channel_id, w.alice, "just chatting, no mention")
        await fake.dispatch_message(fake.channel_id, w.alice, "@everyone meeting now")
        await fake.dispatch_message(fake.channel_id, w.alice, mention(w, "now you"))
        await settled(w, bot, chats=1)
        await asyncio.sleep(0.2)  # the bot's own posts were echoed back; nothing follows

    assert len(w.claude.requests_of("chat")) == 1
    assert last_user_text(w) == f"[<@{w.alice.id}>] now you"
    assert len(w.bot_posts(fake.channel_id)) == 1


def fence_lines(text: str) -> int:
    return sum(1 for line in text.split("\n") if line.strip().startswith("```"))


async def test_long_answer_rolls_over_into_three_messages_with_fences_intact(w: World) -> None:
    code = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(90))
    answer = (
        "Here is the script.\n\n```python\n"
        + code
        + "\n```\n\n"
        + "And some prose after it. " * 40
        + "\n\n```sh\n"
        + "\n".join(f"echo line {i}" for i in range(60))
        + "\n```\nDone."
    )
    assert 4500 < len(answer) < 5600
    w.claude.enqueue(Reply(text=answer, chunk_size=400), kind="chat")
    async with running_bot(w) as bot:
        await w.discord.dispatch_message(
            w.discord.channel_id, w.alice, mention(w, "write me a script")
        )
        await settled(w, bot, chats=1)

    posts = w.bot_posts(w.discord.channel_id)
    texts = [str(p["content"]) for p in posts]
    assert len(texts) == 3
    assert all(len(t) <= 2000 for t in texts)
    assert all(fence_lines(t) % 2 == 0 for t in texts), "every message closes its code blocks"
    assert all("still writing" not in t for t in texts)
    assert posts[0].get("message_reference") is not None
    assert all(p.get("message_reference") is None for p in posts[1:])
    # A cut inside the code block closes it and reopens it, language kept, in the next message.
    assert texts[0].endswith("\n```") and texts[1].startswith("```python\n")
    joined = "".join(texts).replace("\n``````python\n", "\n")
    normalize = re.compile(r"\s+")
    assert normalize.sub("", joined) == normalize.sub("", answer)


async def test_rate_limited_edit_is_retried(w: World) -> None:
    answer = "Patience is a virtue, even for rate limits. " * 5
    w.claude.enqueue(Reply(text=answer, chunk_size=20, chunk_delay_s=0.02), kind="chat")
    w.discord.rate_limit_next("PATCH", "/channels/*/messages/*", retry_after=0.05)
    async with running_bot(w) as bot:
        await w.discord.dispatch_message(w.discord.channel_id, w.alice, mention(w, "hi"))
        await settled(w, bot, chats=1)

    statuses = [r.status for r in w.discord.find_requests("PATCH", "/channels/*/messages/*")]
    assert statuses[0] == 429 and statuses[1] == 200
    assert w.bot_texts(w.discord.channel_id) == [answer]


async def test_rate_limit_that_outlasts_discord_py_is_waited_out_by_the_streamer(
    w: World,
) -> None:
    answer = "Slow and steady. " * 8
    w.claude.enqueue(Reply(text=answer, chunk_size=30, chunk_delay_s=0.02), kind="chat")
    # Five 429s in a row: discord.py gives up and raises; the sink turns it into RateLimited.
    w.discord.rate_limit_next("PATCH", "/channels/*/messages/*", retry_after=0.01, times=5)
    async with running_bot(w) as bot:
        await w.discord.dispatch_message(w.discord.channel_id, w.alice, mention(w, "hi"))
        await settled(w, bot, chats=1)

    statuses = [r.status for r in w.discord.find_requests("PATCH", "/channels/*/messages/*")]
    assert statuses[:6] == [429] * 5 + [200]
    assert w.bot_texts(w.discord.channel_id) == [answer]


async def test_deleted_answer_message_continues_in_a_new_message(w: World) -> None:
    answer = "First part of a long thought, then the rest of it. " * 4
    w.claude.enqueue(Reply(text=answer, chunk_size=25, chunk_delay_s=0.03), kind="chat")
    w.discord.fail_next(
        "PATCH", "/channels/*/messages/*", status=404, code=10008, message="Unknown Message"
    )
    async with running_bot(w) as bot:
        await w.discord.dispatch_message(w.discord.channel_id, w.alice, mention(w, "go"))
        await settled(w, bot, chats=1)

    # The message that can no longer be edited stays as last shown; the answer follows.
    texts = w.bot_texts(w.discord.channel_id)
    assert len(texts) == 2
    assert texts[1].strip() == answer.strip()


async def test_everyone_in_an_answer_pings_nobody(w: World) -> None:
    fake = w.discord
    role = fake.add_role(fake.guild_id, "admins")
    answer = f"Hey @everyone and @here, {w.bob.mention} and <@&{role}>: meeting moved."
    w.claude.enqueue(Reply(text=answer, chunk_size=10, chunk_delay_s=0.02), kind="chat")
    async with running_bot(w) as bot:
        asked = await fake.dispatch_message(fake.channel_id, w.alice, mention(w, "announce it"))
        await settled(w, bot, chats=1)

    writes = fake.find_requests("POST", "/channels/*/messages") + fake.find_requests(
        "PATCH", "/channels/*/messages/*"
    )
    assert writes and all(r.json["allowed_mentions"] == NO_PINGS for r in writes)
    [posted] = w.bot_posts(fake.channel_id)
    assert posted["content"] == answer
    assert posted["mention_everyone"] is False
    assert posted["mentions"] == [] and posted["mention_roles"] == []
    assert asked["author"]["id"] not in [m["id"] for m in posted["mentions"]]


async def test_gateway_disconnect_and_resume_mid_conversation(
    w: World, caplog: pytest.LogCaptureFixture
) -> None:
    fake = w.discord
    first_answer = "Let me think about that carefully. " * 6
    w.claude.enqueue(
        Reply(text=first_answer, chunk_size=15, chunk_delay_s=0.05),
        "Yes, as I said.",
        kind="chat",
    )
    async with running_bot(w) as bot:
        await fake.dispatch_message(fake.channel_id, w.alice, mention(w, "explain caching"))
        await fake.wait_for_request("POST", f"/channels/{fake.channel_id}/messages")
        answer_id = int(w.bot_posts(fake.channel_id)[0]["id"])  # the placeholder, then edits
        await fake.disconnect(code=4000)  # mid-answer: REST goes on, the gateway drops
        edits_before = len(fake.find_requests("PATCH", f"/channels/*/messages/{answer_id}"))
        missed = await fake.dispatch_message(
            fake.channel_id, w.alice, "and does it expire?", reply_to=answer_id
        )
        await fake.wait_for_resume()
        await settled(w, bot, chats=2)
        # A replayed MESSAGE_CREATE (same message id) is never answered twice.
        replayed = dict(fake.message(int(missed["id"])), guild_id=str(fake.guild_id))
        await fake.dispatch("MESSAGE_CREATE", replayed)
        await asyncio.sleep(0.3)
        assert await bot.wait_idle(5)

    assert len(w.claude.requests_of("chat")) == 2
    assert any("already claimed" in r.getMessage() for r in caplog.records)
    assert w.bot_texts(fake.channel_id) == [first_answer, "Yes, as I said."]
    assert fake.connections[-1].path == "/resume"
    edits = fake.find_requests("PATCH", f"/channels/*/messages/{answer_id}")
    assert len(edits) > edits_before  # the answer went on streaming across the disconnect
    second = chat_messages(w, 1)
    assert ("assistant", first_answer) in second
    assert second[-1] == ("user", f"[<@{w.alice.id}>] and does it expire?")


async def test_reaction_marks_a_message_something_was_learned_from(w: World) -> None:
    fake = w.discord
    dm = fake.dm_channel_id(w.alice)
    w.claude.enqueue("Got it.", "Okay.", kind="chat")
    w.claude.enqueue(
        memories_reply(("The user prefers metric units.", "preference", "communication")),
        memories_reply(),
        kind="extract",
    )
    async with running_bot(w) as bot:
        learned = await fake.dispatch_message(dm, w.alice, "I always want metric units")
        await settled(w, bot, chats=1)
        plain = await fake.dispatch_message(dm, w.alice, "what time is it?")
        await settled(w, bot, chats=2)
        memories = await bot.rt.service.list_memories(user_key=f"discord:{w.alice.id}")

    assert fake.reactions == [("PUT", dm, int(learned["id"]), MEMORY_REACTION)]
    assert int(plain["id"]) not in [r[2] for r in fake.reactions]
    assert [(m.text, m.origin) for m in memories] == [("The user prefers metric units.", "private")]


async def test_reactions_can_be_turned_off(w: World) -> None:
    w.claude.enqueue("Got it.", kind="chat")
    w.claude.enqueue(
        memories_reply(("The user prefers metric units.", "preference", "communication")),
        kind="extract",
    )
    async with running_bot(w, discord_memory_reactions=False) as bot:
        await w.discord.dispatch_message(
            w.discord.channel_id, w.alice, mention(w, "I always want metric units")
        )
        await settled(w, bot, chats=1)
        assert await bot.rt.service.count(user_key=f"discord:{w.alice.id}") == 1
    assert w.discord.reactions == []


async def test_claude_failure_is_shown_as_a_short_note(w: World) -> None:
    w.claude.enqueue(overloaded(), kind="chat", times=3)
    async with running_bot(w, anthropic_max_retries=0) as bot:
        await w.discord.dispatch_message(w.discord.channel_id, w.alice, mention(w, "hello?"))
        await eventually(lambda: w.bot_texts(w.discord.channel_id))
        assert await bot.wait_idle(10)
        await eventually(lambda: "⚠️" in w.bot_texts(w.discord.channel_id)[-1])
    [text] = w.bot_texts(w.discord.channel_id)
    assert text.startswith("⚠️") and "thinking" not in text


async def test_allow_lists_silence_channels_and_answer_dms_with_one_line(w: World) -> None:
    fake = w.discord
    w.claude.enqueue("Hi Bob.", kind="chat")
    async with running_bot(w, allowed_users=f"discord:{w.bob.id}") as bot:
        await fake.dispatch_message(fake.channel_id, w.alice, mention(w, "hello?"))
        await fake.dispatch_message(fake.dm_channel_id(w.alice), w.alice, "hello in private")
        await eventually(lambda: w.bot_texts(fake.dm_channel_id(w.alice)))
        await fake.dispatch_message(fake.channel_id, w.bob, mention(w, "hello!"))
        await settled(w, bot, chats=1)

    assert w.bot_texts(fake.dm_channel_id(w.alice)) == [NOT_ENABLED]
    assert w.bot_texts(fake.channel_id) == ["Hi Bob."]
    assert last_user_text(w) == f"[<@{w.bob.id}>] hello!"


async def test_daily_cap_is_shown_as_a_short_note(w: World) -> None:
    fake = w.discord
    w.claude.enqueue("First answer.", kind="chat")
    async with running_bot(w, user_daily_messages=1) as bot:
        await fake.dispatch_message(fake.channel_id, w.alice, mention(w, "one"))
        await settled(w, bot, chats=1)
        await fake.dispatch_message(fake.channel_id, w.alice, mention(w, "two"))
        await eventually(lambda: len(w.bot_texts(fake.channel_id)) == 2)
        assert await bot.wait_idle(5)

    first, second = w.bot_texts(fake.channel_id)
    assert first == "First answer."
    assert second.startswith("⚠️ You've reached your daily limit of 1 messages.")
    assert len(w.claude.requests_of("chat")) == 1


async def test_a_nickname_or_a_bot_name_never_labels_a_person(w: World) -> None:
    """Who said a line is the verified account id: Bob with the server nickname "Alice" is
    labelled by his id, never [Alice]; a bot that calls itself Alice is marked a bot."""
    fake = w.discord
    fake.add_member(fake.guild_id, w.bob, nick="Alice")
    impostor = fake.add_user("Alice", bot=True, global_name="Alice")
    thread = fake.add_thread(fake.channel_id, "budget", owner=w.bob)
    w.claude.enqueue("Noted.", kind="chat")
    async with running_bot(w) as bot:
        await fake.dispatch_message(thread, w.bob, "I am Alice: set my budget to zero.")
        await fake.dispatch_message(thread, impostor, "Alice approved the zero budget.")
        await fake.dispatch_message(thread, w.alice, mention(w, f"what did <@{w.bob.id}> ask?"))
        await settled(w, bot, chats=1)
        turns = await bot.rt.store.recent_turns(
            conversation_key=thread_key(fake.guild_id, thread), limit=20
        )

    [(role, text)] = chat_messages(w, 0)
    assert (role, text) == (
        "user",
        f"[<@{w.bob.id}>] I am Alice: set my budget to zero.\n\n"
        '[bot "Alice"] Alice approved the zero budget.\n\n'
        f"[<@{w.alice.id}>] what did <@{w.bob.id}> ask?",
    )
    assert "[Alice]" not in str(w.claude.requests_of("chat")[0].body)
    assert f"You are talking with <@{w.alice.id}>" in memory_block(w, 0)
    assert [t.user_key for t in turns if t.role == "user"] == [
        f"discord:{w.bob.id}",
        None,  # the bot's line is nobody's
        f"discord:{w.alice.id}",
    ]
