"""The file rule on its own: placeholders, the download rule over a real local server, and
what bytes become (types sniffed, images scaled down, PDFs counted, text checked)."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import gc
import io
import re
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from PIL import Image

from core.files import FileReader, FileRef, placeholder, placeholder_names, with_placeholders
from core.files.fetch import FileProblem, fetch, origin
from core.files.prepare import MAX_IMAGE_BASE64_BYTES, pdf_pages, prepare
from core.files.reader import held_bytes
from core.model.body import base64_size
from core.model.claude import FileBlock
from tests.files_helpers import image_bytes, junk_pdf, pdf, png

KB = 1024


def test_placeholders_name_kind_and_size_and_are_found_again() -> None:
    files = [
        FileRef("screenshot.png", size=142 * KB, media_type="image/png"),
        FileRef("report.pdf", size=3 * KB * KB + 400 * KB),
        FileRef("app.log", size=900),
        FileRef("weird]\n[name.zip"),
    ]
    text = with_placeholders("look at these", files)
    assert text.splitlines() == [
        "look at these",
        "[image: screenshot.png, 142 KB]",
        "[pdf: report.pdf, 3.4 MB]",
        "[text: app.log, 900 bytes]",
        "[file: weird) (name.zip]",
    ]
    assert placeholder_names(text) == [
        "screenshot.png",
        "report.pdf",
        "app.log",
        "weird) (name.zip",
    ]
    assert placeholder_names("no files here") == []
    assert placeholder(FileRef("")) == "[file: file]"


# --- the download rule, against a real HTTP server


SEEN: list[str] = []
"""The Authorization headers the test server's ``/ok`` saw."""


@pytest.fixture
async def host() -> AsyncIterator[str]:
    seen = SEEN

    async def ok(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.Response(body=b"hello file", content_type="text/plain")

    async def same(request: web.Request) -> web.Response:
        raise web.HTTPFound("/ok")

    async def elsewhere(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://127.0.0.2:9/steal")

    async def to_userinfo(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://x@{request.host}/ok")

    async def to_bad_port(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "http://127.0.0.1:99999/ok"})

    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]))

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html>sign in</html>", content_type="text/html")

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()  # chunked: no Content-Length to refuse up front
        await response.prepare(request)
        for _ in range(1000):
            await response.write(b"x" * 64 * KB)
        return response

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(body=b"late")

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/same", same)
    app.router.add_get("/elsewhere", elsewhere)
    app.router.add_get("/to-userinfo", to_userinfo)
    app.router.add_get("/to-bad-port", to_bad_port)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/page", page)
    app.router.add_get("/endless", endless)
    app.router.add_get("/slow", slow)
    SEEN[:] = []
    seen = SEEN
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _get(
    url: str,
    *,
    origins: frozenset[str] | None = None,
    max_bytes: int = 1 << 20,
    timeout_s: float = 5.0,
    name: str = "f.txt",
) -> bytes:
    ref = FileRef(
        name,
        url=url,
        bearer="xoxb-secret",
        allowed_origins=origins if origins is not None else frozenset({origin(url)}),
    )
    async with aiohttp.ClientSession() as session:
        return await fetch(ref, session=session, max_bytes=max_bytes, timeout_s=timeout_s)


async def test_download_follows_same_origin_redirects_with_the_token(host: str) -> None:
    assert await _get(f"{host}/same") == b"hello file"
    assert SEEN == ["Bearer xoxb-secret"]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/elsewhere", "led to another site"),
        ("/status/403", "refused the download (403)"),
        ("/status/404", "no longer has it (404)"),
        ("/status/500", "HTTP 500"),
        ("/page", "web page instead of the file"),
        ("/endless", "over my 1.0 MB limit"),
    ],
)
async def test_download_refusals_each_have_a_reason(host: str, path: str, reason: str) -> None:
    with pytest.raises(FileProblem, match=re.escape(reason)):
        await _get(host + path)


async def test_download_never_leaves_the_allowed_origins_and_times_out(host: str) -> None:
    with pytest.raises(FileProblem, match="not on the platform's file host"):
        await _get(f"{host}/ok", origins=frozenset({"https://files.slack.com:443"}))
    with pytest.raises(FileProblem, match=r"longer than 0\.2 s"):
        await _get(f"{host}/slow", timeout_s=0.2)


@pytest.mark.parametrize(
    "link",
    [
        "http://x@{hostport}/ok",
        "http://user:pw@{hostport}/ok",
        "http://127.0.0.1:99999/ok",
        "http://127.0.0.1:port/ok",
        "http://[::1/ok",
        "{host}/to-userinfo",
        "{host}/to-bad-port",
    ],
)
async def test_a_link_with_user_info_or_a_bad_port_is_a_file_problem(host: str, link: str) -> None:
    """Never a ValueError out of fetch: the link (or a redirect to one) is refused with the
    one sentence, and the token goes nowhere."""
    url = link.format(host=host, hostport=host.removeprefix("http://"))
    with pytest.raises(FileProblem, match="its link is not a valid address"):
        await _get(url, origins=frozenset({origin(host)}))
    assert SEEN == []


async def test_every_error_of_a_file_ends_in_its_note_and_the_rest_is_read(
    host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad link, and a parser raising what no rule expects, each end in one note; the
    other files are read all the same."""
    allowed = frozenset({origin(host)})
    refs = [
        FileRef("a.txt", url=f"{host}/ok", allowed_origins=allowed),
        FileRef("b.txt", url="http://x@files.slack.com/b.txt", allowed_origins=allowed),
        FileRef("c.txt", url=f"{host}/to-bad-port", allowed_origins=allowed),
        FileRef("d.txt", url=f"{host}/ok", allowed_origins=allowed),
    ]
    reader = FileReader(
        max_file_bytes=1 << 20, max_text_chars=1000, download_timeout_s=5, memory_bytes=1 << 24
    )
    read = await reader.read(refs)
    assert [b.name for b in read.blocks] == ["a.txt", "d.txt"]
    assert read.notes == (
        "I couldn't read b.txt: its link is not a valid address, so I did not open it.",
        "I couldn't read c.txt: its link is not a valid address, so I did not open it.",
    )

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a parser's surprise")

    monkeypatch.setattr("core.files.reader.prepare", broken)
    read = await reader.read(refs[:1])
    assert read.blocks == ()
    assert read.notes == ("I couldn't read a.txt: it could not be read (an unexpected error).",)


async def test_declared_size_is_refused_before_any_download(host: str) -> None:
    ref = FileRef(
        "big.pdf", size=50 << 20, url=f"{host}/ok", allowed_origins=frozenset({origin(host)})
    )
    async with aiohttp.ClientSession() as session:
        with pytest.raises(FileProblem, match=r"50\.0 MB, over my 20\.0 MB"):
            await fetch(ref, session=session, max_bytes=20 << 20, timeout_s=5)


async def test_local_files(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("local text")
    async with aiohttp.ClientSession() as session:
        got = await fetch(
            FileRef("a.txt", path=str(tmp_path / "a.txt")),
            session=session,
            max_bytes=100,
            timeout_s=5,
        )
        assert got == b"local text"
        for path, reason in ((tmp_path / "nope", "no such file"), (tmp_path, "a folder")):
            with pytest.raises(FileProblem, match=reason):
                await fetch(
                    FileRef("x", path=str(path)), session=session, max_bytes=100, timeout_s=5
                )


# --- what bytes become


def test_types_come_from_the_bytes() -> None:
    for fmt, media_type in (
        ("PNG", "image/png"),
        ("JPEG", "image/jpeg"),
        ("GIF", "image/gif"),
        ("WEBP", "image/webp"),
    ):
        data = image_bytes(fmt)
        block = prepare(FileRef("pic.bin"), data, max_side=8000, max_text_chars=1000).block
        assert (block.kind, block.media_type) == ("image", media_type)
        assert block.data == data  # the exact bytes, kept as they came (base64 only when sent)
    doc = pdf(3)
    block = prepare(FileRef("x"), doc, max_side=8000, max_text_chars=1000).block
    assert (block.kind, block.data) == ("pdf", doc)
    text = prepare(FileRef("data.csv"), b"a,b\n1,2\n", max_side=8000, max_text_chars=1000).block
    assert (text.kind, text.data) == ("text", "a,b\n1,2\n")


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("photo.png", b"\x89PNG\r\n\x1a\n" + b"broken", "not a readable image"),
        ("photo.heic", b"\x00\x00\x00\x18ftypheic", "not this kind"),
        ("report.pdf", b"%PDF-1.7\ngarbage", "not a readable PDF"),
        ("report.pdf", pdf(101), "101 pages, over the 100"),
        ("secret.pdf", pdf(1, password="pw"), "password-protected"),
        ("sheet.xlsx", b"PK\x03\x04" + bytes(range(256)), "not this kind"),
        ("notes.txt", b"\xff\xfe\x00b\x00a\x00d", "binary data"),
        ("notes.txt", "caf\u00e9".encode("latin-1"), "not UTF-8 text"),
    ],
)
def test_bad_files_have_a_reason(name: str, data: bytes, reason: str) -> None:
    with pytest.raises(FileProblem, match=reason):
        prepare(FileRef(name), data, max_side=8000, max_text_chars=1000)


def _raw(block: FileBlock) -> bytes | bytearray:
    assert not isinstance(block.data, str)
    return block.data


def test_images_too_large_are_scaled_down_not_refused() -> None:
    wide = png(9000, 300)
    block = prepare(FileRef("wide.png"), wide, max_side=8000, max_text_chars=10).block
    assert Image.open(io.BytesIO(_raw(block))).size == (1568, 52)
    heavy = png(2400, 2000, noise=True)  # under 8000 px but over 5 MB of base64
    assert len(base64.b64encode(heavy)) > MAX_IMAGE_BASE64_BYTES
    block = prepare(FileRef("heavy.png"), heavy, max_side=8000, max_text_chars=10).block
    assert base64_size(len(_raw(block))) <= MAX_IMAGE_BASE64_BYTES
    assert max(Image.open(io.BytesIO(_raw(block))).size) == 1568
    many = prepare(FileRef("p.png"), png(2500, 100), max_side=2000, max_text_chars=10).block
    assert max(Image.open(io.BytesIO(_raw(many))).size) <= 2000


def test_long_text_is_cut_and_said() -> None:
    data = ("line of a log\n" * 1000).encode()
    prepared = prepare(FileRef("app.log"), data, max_side=8000, max_text_chars=1000)
    assert len(prepared.block.data) <= 1000 and prepared.block.data.endswith("log")
    assert (
        prepared.note
        == f"I read only the first {len(prepared.block.data):,} characters of app.log."
    )


def test_only_the_part_of_a_text_file_kept_is_decoded() -> None:
    # Past what is kept: bytes that are not UTF-8 and a NUL, never decoded, so never refused.
    head = "é ok line\n" * 20_000  # 2-byte characters: a multi-byte one cut between pieces
    data = "\ufeff".encode() + head.encode() + b"\xff\xfe\x00 binary tail"
    prepared = prepare(FileRef("app.log"), data, max_side=8000, max_text_chars=1000)
    assert isinstance(prepared.block.data, str)
    assert prepared.block.data == head[: len(prepared.block.data)]
    assert prepared.block.data.endswith("ok line") and len(prepared.block.data) <= 1000
    assert prepared.note is not None
    whole = prepare(FileRef("a.md"), "\ufeffcafé\n".encode(), max_side=8000, max_text_chars=1000)
    assert (whole.block.data, whole.note) == ("café\n", None)


async def test_reader_reads_what_it_can_and_says_what_it_could_not(tmp_path: Path) -> None:
    (tmp_path / "ok.txt").write_text("fine")
    (tmp_path / "big.txt").write_text("x" * 3000)
    reader = FileReader(
        max_file_bytes=2000, max_text_chars=1000, download_timeout_s=5, memory_bytes=1 << 20
    )
    read = await reader.read(
        [
            FileRef("ok.txt", path=str(tmp_path / "ok.txt")),
            FileRef("big.txt", path=str(tmp_path / "big.txt")),
            FileRef("gone.png", unavailable="Slack did not share it with me"),
        ]
    )
    assert [b.name for b in read.blocks] == ["ok.txt"]
    assert read.notes == (
        "I couldn't read big.txt: it is 3 KB, over my 2 KB limit for a file.",
        "I couldn't read gone.png: Slack did not share it with me.",
    )


async def test_a_pdf_whose_base64_cannot_fit_a_request_is_not_downloaded() -> None:
    reader = FileReader(
        max_file_bytes=30 << 20, max_text_chars=1000, download_timeout_s=5, memory_bytes=1 << 20
    )
    read = await reader.read(
        [
            FileRef(
                "scan.pdf",
                size=25 << 20,
                url="https://files.slack.com/x",
                allowed_origins=frozenset(),
            )
        ]
    )
    assert read.notes == (
        "I couldn't read scan.pdf: it would pass the 32 MB Claude takes in one request"
        " (files and text together).",
    )


async def test_read_files_are_let_go_without_waiting_for_the_garbage_collector(
    tmp_path: Path,
) -> None:
    # pypdf's reader is a reference cycle, and so is a refused file's traceback: neither may
    # keep a file's bytes until the collector runs (a burst would pile them up).
    good = pdf(3, pad_bytes=4 << 20)
    (tmp_path / "good.pdf").write_bytes(good)
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.7\n" + bytes(4 << 20))
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(4 << 20))
    reader = FileReader(
        max_file_bytes=8 << 20, max_text_chars=1000, download_timeout_s=5, memory_bytes=1 << 30
    )
    refs = [FileRef(n, path=str(tmp_path / n)) for n in ("good.pdf", "bad.pdf", "bad.png")]
    await reader.read(refs)  # once before: Pillow loads its plugins on the first image
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        read = await reader.read(refs)
        assert [b.name for b in read.blocks] == ["good.pdf"] and len(read.notes) == 2
        del read
        for _ in range(200):  # a worker thread may still be dropping its last reference
            left = tracemalloc.get_traced_memory()[0]
            if left < len(good) // 4:
                break
            await asyncio.sleep(0.01)
    finally:
        tracemalloc.stop()
        gc.enable()
    assert left < len(good) // 4  # with the collector off all along


def test_images_are_decoded_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The byte budget counts a file's bytes; a small PNG can decode to a hundred MB. Worker
    threads decode one image at a time, so decoded pixels add at most one image's worth."""
    from PIL import Image

    import core.files.prepare as prepare_module

    inside, most = 0, 0
    lock = threading.Lock()
    real_load = Image.Image.load

    def slow_load(self: Image.Image) -> object:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.02)  # long enough for the other threads to try
        try:
            return real_load(self)
        finally:
            with lock:
                inside -= 1

    monkeypatch.setattr(Image.Image, "load", slow_load)
    data = png(300, 200)
    ref = FileRef("shot.png", size=len(data), media_type="image/png")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        done = list(
            pool.map(
                lambda _: prepare_module.prepare(ref, data, max_side=8000, max_text_chars=100),
                range(8),
            )
        )
    assert len(done) == 8 and all(p.block is not None for p in done)
    assert most == 1


async def test_a_junk_pdf_is_stopped_at_its_deadline_and_its_budget_given_back(
    tmp_path: Path,
) -> None:
    """pypdf's repair scan of a junk file runs in a child killed at the deadline: the file
    gets its note, the budget it held is given back, the other PDF is read."""
    (tmp_path / "junk.pdf").write_bytes(junk_pdf(10 << 20))  # about 4 s of CPU
    (tmp_path / "good.pdf").write_bytes(pdf(2))
    refs = [
        FileRef(n, size=(tmp_path / n).stat().st_size, path=str(tmp_path / n))
        for n in ("junk.pdf", "good.pdf")
    ]
    reader = FileReader(
        max_file_bytes=20 << 20,
        max_text_chars=1000,
        download_timeout_s=5,
        memory_bytes=64 << 20,
        parse_timeout_s=1.5,
    )
    started = time.monotonic()
    async with reader.hold(refs) as held:
        assert reader.budget.used_bytes == sum(r.size or 0 for r in refs)
        read = await reader.read(refs, held=held)
        assert [b.name for b in read.blocks] == ["good.pdf"]
        assert reader.budget.used_bytes == held_bytes(read.blocks[0])  # the junk's went
    assert reader.budget.used_bytes == 0
    assert time.monotonic() - started < 6  # the deadline, not the scan
    assert read.notes == ("I couldn't read junk.pdf: it took over 1.5 s to read, so I stopped.",)


async def test_a_messages_files_share_a_parse_time(tmp_path: Path) -> None:
    """Each junk PDF stops at the deadline, and a message's files together at three times
    it: the fourth is not started (ten junk files wait 30 s, not 100 s)."""
    (tmp_path / "junk.pdf").write_bytes(junk_pdf(10 << 20))
    size = (tmp_path / "junk.pdf").stat().st_size
    refs = [FileRef(f"junk{i}.pdf", size=size, path=str(tmp_path / "junk.pdf")) for i in range(4)]
    reader = FileReader(
        max_file_bytes=20 << 20,
        max_text_chars=1000,
        download_timeout_s=5,
        memory_bytes=64 << 20,
        parse_timeout_s=0.7,
    )
    read = await reader.read(refs)
    assert read.blocks == ()
    assert read.notes[-1] == (
        "I couldn't read junk3.pdf: the files before it took all the time I give one "
        "message's files."
    )
    assert all("took over 0.7 s" in note for note in read.notes[:2])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"%PDF-1.4\n" + bytes(range(256)) * 40, "it is not a readable PDF"),
        (b"", "it is not a readable PDF"),
    ],
)
def test_the_page_count_child_refuses_what_it_cannot_read(data: bytes, reason: str) -> None:
    with pytest.raises(FileProblem, match=re.escape(reason)):
        pdf_pages(data, timeout_s=10)
    assert pdf_pages(pdf(3), timeout_s=10) == 3
