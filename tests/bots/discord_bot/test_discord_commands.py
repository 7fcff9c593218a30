"""Slash commands, autocomplete and buttons through the real discord.py app_commands tree,
dispatched as INTERACTION_CREATE by the fake Discord. Every answer is ephemeral and every
command touches only the caller's memories."""

from __future__ import annotations

import json

import pytest

from bots.discord_bot.client import SelfMindBot
from bots.discord_bot.commands import PAGE_SIZE
from core.chat.controls import NOT_ENABLED
from core.memory.refs import STALE_BUTTON, created_stamp, memory_ref
from core.memory.replies import exported
from core.rules.cleanup_ops import RetireOp
from tests.discord_helpers import (
    NO_PINGS,
    World,
    buttons,
    command,
    final_text,
    key,
    running_bot,
)
from tests.fakes.discord_server import FLAG_EPHEMERAL

pytestmark = pytest.mark.usefixtures("no_errors")


async def test_commands_are_synced_globally(w: World, bot: SelfMindBot) -> None:
    names = {c["name"]: c for c in w.discord.global_commands}
    assert set(names) == {"remember", "forget", "memories", "memory"}
    subcommands = {o["name"] for o in names["memory"]["options"]}
    assert subcommands == {"pause", "resume", "off", "on", "undo"}
    assert {o["name"] for o in names["memories"]["options"]} == {
        "list",
        "search",
        "export",
        "cleanup",
        "channel",
    }
    channel = next(o for o in names["memories"]["options"] if o["name"] == "channel")
    assert channel["type"] == 2  # a subcommand group: this channel's own memory
    assert {o["name"] for o in channel["options"]} == {
        "list",
        "add",
        "correct",
        "forget",
        "undo",
        "on",
        "off",
    }
    forget_option = names["forget"]["options"][0]
    assert forget_option["name"] == "memory" and forget_option["autocomplete"] is True


async def test_remember_is_ephemeral_and_origin_follows_the_place(
    w: World, bot: SelfMindBot
) -> None:
    fake = w.discord
    _, response = await command(fake, "remember", w.alice, text="I prefer tabs over spaces.")
    assert (response.type, response.ephemeral) == (4, True)
    assert response.content == "Remembered (`#1`): The user prefers tabs over spaces."
    _, again = await command(fake, "remember", w.alice, text="i prefer tabs over spaces")
    assert again.content == "I already knew that (`#1`)."
    _, in_dm = await command(
        fake, "remember", w.alice, text="My dog is Pixel.", channel_id=fake.dm_channel_id(w.alice)
    )
    assert in_dm.ephemeral and in_dm.content == "Remembered (`#2`): The user's dog is Pixel."

    memories = await bot.rt.service.list_memories(user_key=key(w.alice))
    assert [(m.text, m.origin, m.source) for m in memories] == [
        ("The user's dog is Pixel.", "private", "remember"),
        ("The user prefers tabs over spaces.", "shared", "remember"),
    ]
    assert await bot.rt.service.count(user_key=key(w.bob)) == 0
    assert fake.messages_in(fake.channel_id) == []  # nothing visible in the channel


async def test_remember_shows_the_stored_text_inert_and_pings_nobody(
    w: World, bot: SelfMindBot
) -> None:
    fake = w.discord
    typed = f"Ping @everyone and {w.bob.mention} with **bold** `code` on deploys"
    _, response = await command(fake, "remember", w.alice, text=typed)
    assert response.content == (
        f"Remembered (`#1`): Ping @everyone and {w.bob.mention} with \\*\\*bold\\*\\* \\`code\\`"
        " on deploys"
    )
    assert response.data["allowed_mentions"] == NO_PINGS
    _, listed = await command(fake, "memories list", w.alice)
    assert listed.data["allowed_mentions"] == NO_PINGS


async def test_remember_refuses_a_secret_and_stores_nothing(w: World, bot: SelfMindBot) -> None:
    fake = w.discord
    token = "ghp_" + "Zx8Qp2Lm9Rt4Vb7Nc1Kd6Hs3Jf0Wg5YaBcDe"
    _, response = await command(fake, "remember", w.alice, text=f"My GitHub token is {token}")
    assert (response.type, response.ephemeral) == (4, True)
    assert response.content == (
        "That looks like a GitHub token, and secrets are never stored as memories, "
        "so nothing was remembered."
    )
    _, pin = await command(fake, "remember", w.alice, text="Meine PIN ist 4711")
    assert pin.content.startswith("That looks like a PIN,") and "4711" not in pin.content
    assert await bot.rt.service.count(user_key=key(w.alice)) == 0
    assert fake.messages_in(fake.channel_id) == []


async def test_forget_autocomplete_offers_only_the_callers_memories(
    w: World, bot: SelfMindBot
) -> None:
    fake, service = w.discord, bot.rt.service
    await service.remember(user_key=key(w.alice), text="The user drinks green tea.")
    await service.remember(user_key=key(w.alice), text="The user lives in Lisbon.")
    await service.remember(user_key=key(w.bob), text="The user drinks black tea.")
    _, tea = await service.list_memories(user_key=key(w.alice))  # newest first
    (bobs,) = await service.list_memories(user_key=key(w.bob))

    interaction = await fake.dispatch_autocomplete(
        "forget", user=w.alice, focused="memory", options={"memory": "tea"}
    )
    response = await fake.wait_for_interaction_response(interaction)
    assert response.type == 8
    assert response.choices == [
        {"name": f"#{tea.id} The user drinks green tea.", "value": memory_ref(tea)},
        {"name": "All my memories", "value": "all"},
    ]

    interaction = await fake.dispatch_autocomplete(
        "forget", user=w.alice, focused="memory", options={"memory": ""}
    )
    values = [c["value"] for c in (await fake.wait_for_interaction_response(interaction)).choices]
    assert memory_ref(bobs) not in values and values[-1] == "all" and len(values) == 3

    interaction = await fake.dispatch_autocomplete(
        "forget", user=w.bob, focused="memory", options={"memory": "tea"}
    )
    values = [c["value"] for c in (await fake.wait_for_interaction_response(interaction)).choices]
    assert values == [memory_ref(bobs), "all"]


async def test_forget_one_never_reaches_another_users_memory(w: World, bot: SelfMindBot) -> None:
    fake, service = w.discord, bot.rt.service
    alices = await service.remember(user_key=key(w.alice), text="The user lives in Lisbon.")
    bobs = await service.remember(user_key=key(w.bob), text="The user lives in Porto.")

    _, response = await command(fake, "forget", w.bob, memory=str(alices.id))
    assert response.ephemeral and response.content == (
        "No such memory of yours; pick one from the list."
    )
    assert await service.count(user_key=key(w.alice)) == 1

    _, response = await command(fake, "forget", w.bob, memory=str(bobs.id))
    assert response.ephemeral and response.content == f"Forgot `#{bobs.id}`."
    assert await service.count(user_key=key(w.bob)) == 0
    assert await service.count(user_key=key(w.alice)) == 1


async def test_a_stale_forget_choice_forgets_nothing_and_says_so(
    w: World, bot: SelfMindBot
) -> None:
    # The autocomplete offered A; A was forgotten (elsewhere) and B stored before the choice
    # was sent. The choice proves it meant A: it never reaches B, nor does a choice whose id
    # now names another memory. An id typed by hand is taken as it is.
    fake, service = w.discord, bot.rt.service
    await service.remember(user_key=key(w.alice), text="The user lives in Lisbon.")
    interaction = await fake.dispatch_autocomplete(
        "forget", user=w.alice, focused="memory", options={"memory": "Lisbon"}
    )
    [choice, _] = (await fake.wait_for_interaction_response(interaction)).choices
    await command(fake, "forget", w.alice, memory="1")
    b = await service.remember(user_key=key(w.alice), text="The user drinks green tea.")
    assert b.id == 2

    _, response = await command(fake, "forget", w.alice, memory=choice["value"])
    assert response.content == "No such memory of yours; pick one from the list."
    (tea,) = await service.list_memories(user_key=key(w.alice))
    other = f"{tea.id}.{created_stamp(tea.created_at) + 1}"
    _, response = await command(fake, "forget", w.alice, memory=other)
    assert response.ephemeral and response.content == STALE_BUTTON
    assert await service.count(user_key=key(w.alice)) == 1
    _, response = await command(fake, "forget", w.alice, memory=memory_ref(tea))
    assert response.content == "Forgot `#2`."


async def test_forget_all_asks_and_only_the_caller_can_confirm(w: World, bot: SelfMindBot) -> None:
    fake, service = w.discord, bot.rt.service
    for text in ("The user lives in Lisbon.", "The user drinks green tea."):
        await service.remember(user_key=key(w.alice), text=text)
    await service.remember(user_key=key(w.bob), text="The user lives in Porto.")

    interaction, response = await command(fake, "forget", w.alice, memory="all")
    assert response.ephemeral
    assert response.content == (
        "Forget all 2 memories and our conversation history? This cannot be undone."
    )
    assert interaction.original_message_id is not None
    message_id = interaction.original_message_id
    confirm = buttons(fake, message_id)["Forget everything"]

    intruder = await fake.dispatch_component(message_id, confirm["custom_id"], user=w.bob)
    refused = await fake.wait_for_interaction_response(intruder)
    assert refused.ephemeral and "someone else" in (refused.content or "")
    assert await service.count(user_key=key(w.alice)) == 2

    click = await fake.dispatch_component(message_id, confirm["custom_id"], user=w.alice)
    assert (await fake.wait_for_interaction_response(click)).type == 6  # deferred update
    await fake.wait_for_request("PATCH", f"/webhooks/*/{click.token}/messages/@original")
    updated = fake.message(message_id)
    assert updated["content"] == "Forgot all 2 memories and our conversation history."
    assert updated["components"] == []
    assert await service.count(user_key=key(w.alice)) == 0
    assert await service.count(user_key=key(w.bob)) == 1


async def test_forget_all_can_be_cancelled(w: World, bot: SelfMindBot) -> None:
    await bot.rt.service.remember(user_key=key(w.alice), text="The user lives in Lisbon.")
    interaction, _ = await command(w.discord, "forget", w.alice, memory="all")
    assert interaction.original_message_id is not None
    cancel = buttons(w.discord, interaction.original_message_id)["Cancel"]
    click = await w.discord.dispatch_component(
        interaction.original_message_id, cancel["custom_id"], user=w.alice
    )
    assert (await w.discord.wait_for_interaction_response(click)).type == 7
    assert w.discord.message(interaction.original_message_id)["content"] == "Nothing was forgotten."
    assert await bot.rt.service.count(user_key=key(w.alice)) == 1


async def test_memories_list_pages_with_buttons_for_the_caller(w: World, bot: SelfMindBot) -> None:
    fake, service = w.discord, bot.rt.service
    total = PAGE_SIZE + 3
    for i in range(total):
        await service.remember(user_key=key(w.alice), text=f"The user owns plant number {i}.")
    await service.remember(user_key=key(w.bob), text="The user owns a cactus.")

    interaction, response = await command(fake, "memories list", w.alice)
    assert response.ephemeral
    content = response.content or ""
    assert content.startswith(f"Your memories, newest first (1–8 of {total}):")
    assert content.splitlines()[1] == f"Your memory key is `{key(w.alice)}`."  # only hers
    assert f"plant number {total - 1}." in content and "plant number 0." not in content
    assert "cactus" not in content
    assert interaction.original_message_id is not None
    message_id = interaction.original_message_id
    controls = buttons(fake, message_id)
    assert controls["◀ Newer"]["disabled"] is True
    assert controls["Older ▶"].get("disabled") in (False, None)

    intruder = await fake.dispatch_component(
        message_id, controls["Older ▶"]["custom_id"], user=w.bob
    )
    assert (await fake.wait_for_interaction_response(intruder)).ephemeral
    assert fake.message(message_id)["content"] == content

    click = await fake.dispatch_component(
        message_id, controls["Older ▶"]["custom_id"], user=w.alice
    )
    assert (await fake.wait_for_interaction_response(click)).type == 7
    page2 = str(fake.message(message_id)["content"])
    assert page2.startswith(f"Your memories, newest first (9–{total} of {total})")
    assert "plant number 0." in page2 and "cactus" not in page2
    assert buttons(fake, message_id)["Older ▶"]["disabled"] is True


async def test_memories_search_and_empty_list(w: World, bot: SelfMindBot) -> None:
    fake, service = w.discord, bot.rt.service
    await service.remember(user_key=key(w.alice), text="The user drinks green tea.")
    await service.remember(user_key=key(w.alice), text="The user lives in Lisbon.")
    await service.remember(user_key=key(w.bob), text="The user drinks black tea.")

    _, response = await command(fake, "memories search", w.alice, query="tea")
    assert response.ephemeral
    assert (
        response.content == "Your memories that match, best first:\n`#1` The user drinks green tea."
    )
    _, response = await command(fake, "memories search", w.bob, query="Lisbon")
    assert response.content == "None of your memories match."
    _, response = await command(fake, "memories list", fake.owner)
    assert response.content == (
        f"I don't remember anything about you yet. Your memory key is `{key(fake.owner)}`."
    )


async def test_memories_export_is_an_ephemeral_json_lines_attachment(
    w: World, bot: SelfMindBot
) -> None:
    fake, service = w.discord, bot.rt.service
    await service.remember(user_key=key(w.alice), text="The user drinks green tea.")
    await service.remember(user_key=key(w.alice), text="The user lives in Lisbon.", origin="shared")
    await service.remember(user_key=key(w.bob), text="The user lives in Porto.")

    interaction, response = await command(fake, "memories export", w.alice)
    assert (response.type, response.ephemeral) == (5, True)  # deferred first
    assert await final_text(fake, interaction) == exported(2)
    [followup] = fake.find_requests("POST", f"/webhooks/*/{interaction.token}")
    assert int(followup.json["flags"]) & FLAG_EPHEMERAL
    [upload] = followup.files
    assert upload.filename == "selfmind-memories.jsonl"
    lines = [json.loads(line) for line in upload.data.decode().splitlines()]
    assert [(r["text"], r["origin"]) for r in lines] == [
        ("The user drinks green tea.", "private"),
        ("The user lives in Lisbon.", "shared"),
    ]
    assert interaction.original_message_id is not None
    assert fake.messages_in(fake.channel_id) == []


@pytest.mark.parametrize(
    ("sub", "mode", "says"),
    [
        ("pause", "paused", "Memory is paused"),
        ("off", "off", "Memory is off"),
        ("resume", "on", "Memory is on"),
        ("on", "on", "Memory is on"),
    ],
)
async def test_memory_modes_are_per_user(
    w: World, bot: SelfMindBot, sub: str, mode: str, says: str
) -> None:
    store = bot.rt.store
    if sub in ("resume", "on"):
        await store.set_mode(user_key=key(w.alice), mode="off")
    _, response = await command(w.discord, f"memory {sub}", w.alice)
    assert response.ephemeral and (response.content or "").startswith(says)
    assert await store.get_mode(user_key=key(w.alice)) == mode
    assert await store.get_mode(user_key=key(w.bob)) == "on"


async def test_memory_undo_puts_back_last_nights_tidy_only(w: World, bot: SelfMindBot) -> None:
    """Issue 37: consolidation's change (``tidy-`` ids) is undone by ``/memory undo``."""
    store = bot.rt.store
    _, response = await command(w.discord, "memory undo", w.alice)
    assert response.ephemeral and "nothing to undo" in (response.content or "")
    added = await bot.rt.service.remember(user_key=key(w.alice), text="The user drinks tea.")
    await store.apply_change(
        user_key=key(w.alice), change_id="tidy-20261205-abcdef", ops=[RetireOp(added.id)]
    )
    assert await store.count(user_key=key(w.alice)) == 0
    _, response = await command(w.discord, "memory undo", w.bob)  # not Bob's
    assert "nothing to undo" in (response.content or "")
    _, response = await command(w.discord, "memory undo", w.alice)
    assert response.content == "Put back 1 memory as it was before last night's tidy."
    assert await store.count(user_key=key(w.alice)) == 1
    _, response = await command(w.discord, "memory undo", w.alice)
    assert "nothing to undo" in (response.content or "")


async def test_commands_outside_the_allow_lists_say_so(w: World) -> None:
    async with running_bot(w, allowed_users=f"discord:{w.bob.id}") as bot:
        await bot.rt.service.remember(user_key=key(w.alice), text="The user drinks green tea.")
        _, response = await command(w.discord, "memories list", w.alice)
        assert response.ephemeral and response.content == NOT_ENABLED
        interaction = await w.discord.dispatch_autocomplete(
            "forget", user=w.alice, focused="memory", options={"memory": "tea"}
        )
        assert (await w.discord.wait_for_interaction_response(interaction)).choices == []
        _, response = await command(w.discord, "memories list", w.bob)
        assert response.content == (
            f"I don't remember anything about you yet. Your memory key is `{key(w.bob)}`."
        )
