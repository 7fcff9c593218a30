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


async def test_attach_refuses_at_once_what_would_never_be_sent(tmp_path: Path) -> None:
    """Too big, a kind never read, one file too many: one line naming the file and why, at
    ``/attach``, by the limits the send path applies (core.files.FileReader)."""
    from core.files import FileReader
    from core.memory.service import MemoryService
    from core.runtime import open_store

    big = tmp_path / "big.pdf"
    with big.open("wb") as f:  # 40 MB, sparse: a PDF's header, then nothing written
        f.write(b"%PDF-1.4\n")
        f.truncate(40 * 1024 * 1024)
    (tmp_path / "setup.exe").write_bytes(b"MZ\x90\x00\x03\x00\x00\x00" + bytes(range(256)) * 8)
    (tmp_path / "photo.png").write_bytes(b"not an image at all")
    (tmp_path / "notes.bin").write_bytes("plain words, ünïcode too\n".encode())
    (tmp_path / "spec.pdf").write_bytes(pdf(1, marker=MARKER))
    reader = FileReader(
        max_file_bytes=20 * 1024 * 1024,
        max_text_chars=200_000,
        download_timeout_s=5,
        memory_bytes=100 * 1024 * 1024,
    )
    out = io.StringIO()
    store = await open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        chat = TerminalChat(
            MemoryService(store), user_key="cli:ann", screen=PlainScreen(out), files=reader
        )
        for name in ("big.pdf", "setup.exe", "photo.png", "notes.bin", "spec.pdf"):
            await chat.handle(f"/attach {tmp_path / name}")
        assert [f.name for f in chat.attached] == ["notes.bin", "spec.pdf"]
        chat.attached *= 50  # 100 files: one more is one too many
        await chat.handle(f"/attach {tmp_path / 'notes.bin'}")
        assert len(chat.attached) == 100
    finally:
        await store.close()
    assert out.getvalue().splitlines() == [
        "Not attached: big.pdf: it is 40.0 MB, over my 20.0 MB limit for a file.",
        "Not attached: setup.exe: I read images (PNG, JPEG, GIF, WebP), PDFs and text files,"
        " not this kind.",
        "Not attached: photo.png: it is not a readable image.",
        "Attached [file: notes.bin, 27 bytes]; it goes with your next message.",
        f"Attached [pdf: spec.pdf, {(tmp_path / 'spec.pdf').stat().st_size} bytes]; it goes with"
        " your next message.",
        "Not attached: notes.bin: I read at most 100 files of one message.",
    ]
