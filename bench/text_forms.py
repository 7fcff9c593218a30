"""Text files sent to Claude: as a ``document`` block with a text source, or quoted in a text
block? Offline, on a few realistic files.

    python bench/text_forms.py [--repeat 200] [--json]

For each sample (a service log, a CSV export with quoted fields, this repository's
``core/model/claude.py``, its ``docs/files.md``) and each form, the request the bot would
send with it (the file, then the person's one-line message):

- ``document``: ``{"type": "document", "source": {"type": "text", "media_type":
  "text/plain", "data": TEXT}, "title": NAME}`` (what the bot sends);
- ``quoted``: one text block, ``NAME:`` then the file inside a Markdown fence longer than any
  run of backticks in it (so the file cannot close it), before the message's own block.

Columns: ``bytes`` the request body (``core.model.body.dumps``, the SDK's encoding); ``+bytes``
what the form adds over the file's own JSON-escaped text; ``tokens`` the fake Anthropic
API's count of the request (``tests.fakes.anthropic_server.prompt_tokens``: a quarter of the
characters; the real API's overhead for a document block is not known offline);
``build us`` the CPU time to build the content blocks and encode the body, median of
``--repeat`` runs (``time.process_time_ns``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.model.body import dumps
from tests.fakes.anthropic_server import prompt_tokens

ROOT = Path(__file__).resolve().parent.parent
MESSAGE = "What went wrong here?"


def service_log(lines: int = 2000) -> str:
    rng = random.Random(7)
    levels = ["INFO"] * 8 + ["WARNING", "ERROR"]
    out = []
    for i in range(lines):
        level = rng.choice(levels)
        ms = rng.randint(2, 900)
        path = rng.choice(["/api/orders", "/api/users/42", "/health", '/search?q="red shoes"'])
        out.append(
            f"2026-11-29T12:{i // 60 % 60:02d}:{i % 60:02d}.{ms:03d}Z {level} web.request "
            f"method=GET path={path} status={rng.choice([200, 200, 404, 500])} ms={ms} "
            f'extra={{"user": "u{rng.randint(1, 999)}", "trace": "{rng.getrandbits(64):016x}"}}'
        )
    return "\n".join(out) + "\n"


def csv_export(rows: int = 3000) -> str:
    rng = random.Random(11)
    out = ["id,name,city,notes,amount"]
    for i in range(rows):
        note = rng.choice(['"late, again"', '"said ""fine"""', "ok", '"café, crème"'])
        out.append(f"{i},Customer {i},{rng.choice(['Paris', 'Zürich', 'Oslo'])},{note},{i * 3.5}")
    return "\n".join(out) + "\n"


def samples() -> dict[str, tuple[str, str]]:
    return {
        "log": ("service.log", service_log()),
        "CSV": ("export.csv", csv_export()),
        "source": ("claude.py", (ROOT / "core/model/claude.py").read_text()),
        "Markdown": ("files.md", (ROOT / "docs/files.md").read_text()),
    }


def as_document(name: str, text: str) -> list[dict[str, Any]]:
    source = {"type": "text", "media_type": "text/plain", "data": text}
    return [
        {"type": "document", "source": source, "title": name},
        {"type": "text", "text": MESSAGE},
    ]


def as_quoted(name: str, text: str) -> list[dict[str, Any]]:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [
        {"type": "text", "text": f"{name}:\n{fence}\n{text}\n{fence}"},
        {"type": "text", "text": MESSAGE},
    ]


def body(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "max_tokens": 16000,
        "messages": [{"role": "user", "content": content}],
        "model": "claude-opus-4-8",
        "stream": True,
        "system": [{"type": "text", "text": "You are SelfMind."}],
        "thinking": {"type": "adaptive"},
    }


def build_us(
    form: Callable[[str, str], list[dict[str, Any]]], name: str, text: str, n: int
) -> float:
    times = []
    for _ in range(n):
        start = time.process_time_ns()
        dumps(body(form(name, text)))
        times.append(time.process_time_ns() - start)
    return statistics.median(times) / 1000


def measure(repeat: int) -> list[dict[str, Any]]:
    rows = []
    forms = {"document": as_document, "quoted": as_quoted}
    for sample, (name, text) in samples().items():
        escaped = len(json.dumps(text, ensure_ascii=False).encode())
        for label, form in forms.items():
            made = body(form(name, text))
            size = len(dumps(made))
            rows.append(
                {
                    "sample": sample,
                    "file_bytes": len(text.encode()),
                    "form": label,
                    "bytes": size,
                    "over_text_bytes": size - escaped,
                    "tokens": prompt_tokens(made),
                    "build_us": round(build_us(form, name, text, repeat), 1),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = measure(args.repeat)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'sample':<10}{'file':>9}{'form':>10}{'bytes':>9}{'+bytes':>8}{'tokens':>8}"
        f"{'build us':>10}"
    )
    for r in rows:
        print(
            f"{r['sample']:<10}{r['file_bytes']:>9}{r['form']:>10}{r['bytes']:>9}"
            f"{r['over_text_bytes']:>8}{r['tokens']:>8}{r['build_us']:>10}"
        )


if __name__ == "__main__":
    main()
