"""``/attach PATH`` in the terminal chat: files for the next message, read for its answer (the
fake Anthropic API records the blocks) and never kept."""

from __future__ import annotations

import base64
import io
from pathlib import Path

from bots.terminal.chat import PlainScreen, TerminalChat
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.files_helpers import grep_store, pdf, png
from tests.loop_helpers import harness

MARKER = "TERMINAL-FILE-MARKER-2290"


async def test_attach_sends_files_with_the_next_message_only(tmp_path: Path) -> None:
    made = {
        "shot.png": png(50, 50, marker=MARKER),
        "spec.pdf": pdf(1, marker=MARKER),
        "data.csv": f"id,note\n1,{MARKER}\n".encode(),
    }
    for name, data in made.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    out = io.StringIO()
    db = tmp_path / "m.db"
    async with running_fake_anthropic() as claude, harness(claude, db) as h:
        chat = TerminalChat(h.service, user_key="cli:ann", screen=PlainScreen(out), loop=h.loop)
        await chat.handle("/help")
        for name in (*made, "broken.pdf", "nope.txt"):
            await chat.handle(f"/attach {tmp_path / name}")
        await chat.handle("/attach")
        await chat.handle("What do these say?")
        await chat.handle("And without files?")
        assert await h.reflector.drain(5)
        with_files, without = claude.requests_of("chat")
        assert grep_store(db, MARKER.encode()) == []
        extract = str([r.body["messages"] for r in claude.requests_of("extract")])
    lines = out.getvalue().splitlines()
    assert "/attach PATH" in lines[0]
    assert lines[1].startswith("Attached [image: shot.png, ")
    assert lines[5] == f"No such file: {tmp_path / 'nope.txt'}"
    assert lines[6] == "Attached for your next message: shot.png, spec.pdf, data.csv, broken.pdf."
    assert lines[7] == "_I couldn't read broken.pdf: it is not a readable PDF._"
    content = with_files.body["messages"][-1]["content"]
    image, spec, data = (b for b in content if b["type"] in ("image", "document"))
    assert base64.b64decode(image["source"]["data"]) == made["shot.png"]
    assert base64.b64decode(spec["source"]["data"]) == made["spec.pdf"]
    assert data["source"]["data"] == made["data.csv"].decode()
    assert isinstance(without.body["messages"][-1]["content"], str)  # attachments went once
    assert '"name": "spec.pdf"' in extract and MARKER not in extract
