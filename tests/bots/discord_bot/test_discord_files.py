"""Discord attachments read for the answer and never kept: the real discord.py client against
the fake Discord (attachments on its CDN route, with Discord's fields) and the fake Claude."""

from __future__ import annotations

import base64

import pytest

from bots.discord_bot.routing import dm_key
from tests.discord_helpers import World, running_bot, settled
from tests.files_helpers import grep_store, pdf, png

pytestmark = pytest.mark.usefixtures("no_errors")

MARKER = "DISCORD-FILE-MARKER-9157"


async def test_attachments_reach_claude_and_only_placeholders_are_kept(w: World) -> None:
    made = {
        "photo.png": png(90, 60, marker=MARKER),
        "paper.pdf": pdf(2, marker=MARKER),
        "trace.log": f"Traceback: boom {MARKER}\n".encode(),
    }
    types = {
        "photo.png": "image/png",
        "paper.pdf": "application/pdf",
        "trace.log": "text/plain; charset=utf-8",
    }
    async with running_bot(w, discord_api_base_url=w.discord.api_base) as bot:
        channel = w.discord.dm_channel_id(w.alice)
        await w.discord.dispatch_message(
            channel,
            w.alice,
            "what do you see?",
            attachments=[(n, d, types[n]) for n, d in made.items()],
        )
        await settled(w, bot, chats=1)
        turns = await bot.rt.store.recent_turns(conversation_key=dm_key(channel), limit=5)
    content = w.claude.requests_of("chat")[-1].body["messages"][-1]["content"]
    image, paper, trace = (b for b in content if b["type"] in ("image", "document"))
    assert base64.b64decode(image["source"]["data"]) == made["photo.png"]
    assert base64.b64decode(paper["source"]["data"]) == made["paper.pdf"]
    assert trace["source"]["data"] == made["trace.log"].decode()
    user = next(t for t in turns if t.role == "user")
    assert user.text.splitlines()[0] == "what do you see?"
    assert [line.split(":")[0] for line in user.text.splitlines()[1:]] == [
        "[image",
        "[pdf",
        "[text",
    ]
    extract = str(w.claude.requests_of("extract")[-1].body["messages"])
    assert '"name": "paper.pdf"' in extract and MARKER not in extract
    assert grep_store(w.db, MARKER.encode()) == []


async def test_bad_attachments_get_a_sentence_and_an_attachment_alone_is_answered(
    w: World,
) -> None:
    async with running_bot(w, discord_api_base_url=w.discord.api_base, file_max_mb=1) as bot:
        channel = w.discord.dm_channel_id(w.alice)
        await w.discord.dispatch_message(
            channel,
            w.alice,
            "",
            attachments=[
                ("big.log", b"x" * (2 << 20), "text/plain"),
                ("clip.mp4", b"\x00\x00\x00\x18ftypmp42" + bytes(64), "video/mp4"),
                ("ok.txt", b"short and fine", "text/plain"),
            ],
        )
        await settled(w, bot, chats=1)
    [answer] = w.bot_texts(channel)[-1:]
    assert "I couldn't read big.log: it is 2.0 MB, over my 1.0 MB limit for a file." in answer
    assert "I couldn't read clip.mp4: I read images (PNG, JPEG, GIF, WebP), PDFs" in answer
    content = w.claude.requests_of("chat")[-1].body["messages"][-1]["content"]
    assert [b.get("title") for b in content if b["type"] == "document"] == ["ok.txt"]


async def test_attachments_elsewhere_than_discords_cdn_are_not_fetched(w: World) -> None:
    async with running_bot(w) as bot:  # DISCORD_API_BASE_URL unset: only Discord's CDN hosts
        channel = w.discord.dm_channel_id(w.alice)
        await w.discord.dispatch_message(
            channel, w.alice, "look", attachments=[("a.png", png(), "image/png")]
        )
        await settled(w, bot, chats=1)
    assert (
        "I couldn't read a.png: its link is not on the platform's file host"
        in (w.bot_texts(channel)[-1])
    )
    assert not w.discord.find_requests("GET", "/attachments/*")
