"""What a junk PDF costs to read, before and after the page count's deadline, in one run.

    python bench/pdf_bound.py [--mb 19] [--timeout 10] [--ten] [--json]

Each file is checked two ways in this process, one after the other:

- ``before`` (the baseline): pypdf's ``PdfReader(strict=False)`` and its page count in this
  process, as :func:`core.files.prepare.prepare` did before issue 36 (in a worker thread that
  nothing could stop);
- ``after``: :func:`core.files.prepare.pdf_pages`, the page count in a child process killed
  at ``--timeout`` seconds (``SELFMIND_FILE_PARSE_TIMEOUT_S``, default 10).

Files: ``real`` (a 100-page PDF, the cost of the child on a file that is fine), and junk
files of ``--mb`` MB (default 19, the size of the file in issue 36) made to send pypdf's
repair into a long scan: ``open objects`` (objects opened and never closed),
``object chain`` (objects that name each other, never an xref), both with a ``startxref``
that points nowhere. Columns: wall seconds, CPU seconds (this process's and its children's,
``resource.getrusage``), the outcome.

``--ten``: ten junk files read as one message reads them (:class:`core.files.FileReader`,
the default file budget), after only: how long the message waits for its files and the CPU
they cost, against ten times the ``before`` of one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.files import FileReader, FileRef
from core.files.fetch import FileProblem
from core.files.prepare import bytes_file, pdf_pages
from tests.files_helpers import chain_pdf, junk_pdf, pdf


def cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def before(data: bytes) -> str:
    """The page count as it was: pypdf in this process, unbounded."""
    from pypdf import PdfReader

    try:
        with bytes_file(data) as view:
            reader = PdfReader(view, strict=False)
            return f"{len(reader.pages)} pages"
    except Exception as exc:
        return f"unreadable ({type(exc).__name__})"


def after(data: bytes, timeout_s: float) -> str:
    try:
        return f"{pdf_pages(data, timeout_s=timeout_s)} pages"
    except FileProblem as problem:
        return problem.reason


def timed(fn: Callable[[], str]) -> dict[str, Any]:
    wall, cpu = time.perf_counter(), cpu_s()
    outcome = fn()
    return {
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(cpu_s() - cpu, 2),
        "outcome": outcome,
    }


async def ten(data: bytes, timeout_s: float) -> dict[str, Any]:
    """Ten junk files in one message, read by the FileReader (default budget, 100 MB)."""
    with tempfile.TemporaryDirectory() as tmp:
        refs = []
        for i in range(10):
            path = Path(tmp) / f"junk{i}.pdf"
            path.write_bytes(data)
            refs.append(FileRef(path.name, size=len(data), path=str(path)))
        reader = FileReader(
            max_file_bytes=30 << 20,
            max_text_chars=200_000,
            download_timeout_s=30,
            memory_bytes=100 << 20,
            parse_timeout_s=timeout_s,
        )
        wall, cpu = time.perf_counter(), cpu_s()
        async with reader.hold(refs) as held:
            read = await reader.read(refs, held=held)
        return {
            "wall_s": round(time.perf_counter() - wall, 2),
            "cpu_s": round(cpu_s() - cpu, 2),
            "read": len(read.blocks),
            "notes": len(read.notes),
            "budget_left_held": reader.budget.used_bytes,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=19.0)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--ten", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # pypdf logs each repair
    size = int(args.mb * (1 << 20))
    files = {
        "real (100 pages)": pdf(100),
        f"open objects ({args.mb:g} MB)": junk_pdf(size),
        f"object chain ({args.mb:g} MB)": chain_pdf(size),
    }
    results: dict[str, Any] = {}
    for name, data in files.items():
        results[name] = {
            "bytes": len(data),
            "before": timed(lambda d=data: before(d)),
            "after": timed(lambda d=data: after(d, args.timeout)),
        }
    if args.ten:
        results["ten open-object files, one message"] = asyncio.run(
            ten(files[f"open objects ({args.mb:g} MB)"], args.timeout)
        )
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'file':26} {'before wall / cpu s':>20}  {'after wall / cpu s':>19}  after outcome")
    for name in files:
        row = results[name]
        b, a = row["before"], row["after"]
        print(
            f"{name:26} {b['wall_s']:>9.2f} / {b['cpu_s']:<8.2f}  {a['wall_s']:>8.2f} / "
            f"{a['cpu_s']:<8.2f}  {a['outcome']}"
        )
    if args.ten:
        t = results["ten open-object files, one message"]
        one = results[f"open objects ({args.mb:g} MB)"]["before"]
        print(
            f"ten junk files in one message (after): {t['wall_s']} s wall, {t['cpu_s']} s CPU,"
            f" {t['notes']} notes, {t['budget_left_held']} bytes still held"
            f" (before: about {10 * one['wall_s']:.0f} s wall, {10 * one['cpu_s']:.0f} s CPU)"
        )


if __name__ == "__main__":
    main()
