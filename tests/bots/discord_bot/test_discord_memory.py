"""The end-to-end memory story on Discord, with ``selfmind discord`` as a real process
(twice: a restart in between) against the fake Discord and the fake Claude in this process.

A preference one user states in a server channel is recalled for that user after the
restart and for nobody else; what the user said in a DM is not recalled in a server channel.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bots.discord_bot.client import MEMORY_REACTION
from tests.discord_helpers import (
    START_S,
    World,
    bot_process,
    chat_messages,
    eventually,
    memory_block,
    stop,
    world,
)
from tests.loop_helpers import memories_reply

PREFERENCE = "The user prefers answers in bullet points."
DOG = "The user has a dog named Pixel."


async def answered(w: World, channel_id: int, count: int) -> None:
    """The bot has posted ``count`` messages in the channel, the last one finished."""

    def done() -> bool:
        texts = w.bot_texts(channel_id)
        return len(texts) == count and not any(m in texts[-1] for m in ("thinking…", "writing"))

    await eventually(done, timeout_s=START_S)


@pytest.mark.slow
async def test_preference_recalled_after_restart_for_its_user_only(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        fake, claude = w.discord, w.claude
        channel, dm = fake.channel_id, fake.dm_channel_id(w.alice)
        mention = fake.bot_user.mention
        log_path = tmp_path / "bot.log"
        with log_path.open("wb") as log:
            first = await bot_process(w, log)
            try:
                await fake.wait_for_session(count=1, timeout_s=START_S)
                claude.enqueue("Bullet points it is.", "Pixel is a lovely name.", kind="chat")
                claude.enqueue(
                    memories_reply((PREFERENCE, "preference", "communication")),
                    memories_reply((DOG, "fact", "general")),
                    kind="extract",
                )
                stated = await fake.dispatch_message(
                    channel, w.alice, f"{mention} I prefer answers in bullet points"
                )
                await fake.wait_for_request("PUT", "/channels/*/reactions/*", timeout_s=START_S)
                told = await fake.dispatch_message(dm, w.alice, "My dog is called Pixel")
                await fake.wait_for_request(
                    "PUT", "/channels/*/reactions/*", count=2, timeout_s=START_S
                )
            finally:
                code = await stop(first)
            assert code == 0

            # Restart: a new process on the same database.
            second = await bot_process(w, log)
            try:
                await fake.wait_for_session(count=2, timeout_s=START_S)
                claude.enqueue("- Pixel? I can't say.", "- No idea.", "- Pixel.", kind="chat")
                question = "How should you format answers for me, and what is my dog called?"
                await fake.dispatch_message(channel, w.alice, f"{mention} {question}")
                await answered(w, channel, 2)
                await fake.dispatch_message(channel, w.bob, f"{mention} {question}")
                await answered(w, channel, 3)
                await fake.dispatch_message(dm, w.alice, "what is my dog called?")
                await answered(w, dm, 3)
            finally:
                code = await stop(second)
            assert code == 0

        log_text = log_path.read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in log_text, log_text[-3000:]
        assert fake.reactions == [
            ("PUT", channel, int(stated["id"]), MEMORY_REACTION),
            ("PUT", dm, int(told["id"]), MEMORY_REACTION),
        ]
        # After the restart, Alice in the server: her preference, not what she said in a DM.
        alice_in_server = memory_block(w, 2)
        assert PREFERENCE in alice_in_server and DOG not in alice_in_server
        assert chat_messages(w, 2) == [
            ("user", f"[<@{w.alice.id}>] {question}")
        ]  # from memory, not history
        # Bob asks the same: none of Alice's memories.
        bob_in_server = memory_block(w, 3)
        assert PREFERENCE not in bob_in_server and DOG not in bob_in_server
        assert chat_messages(w, 3) == [("user", f"[<@{w.bob.id}>] {question}")]
        # Alice in her DM: the DM-learned memory is recalled there.
        assert DOG in memory_block(w, 4)
        assert w.bot_texts(channel)[-2:] == ["- Pixel? I can't say.", "- No idea."]
