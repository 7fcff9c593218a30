"""What the secret check costs per write, against its baselines in the same run.

    python bench/secret_check.py [--repeat 3000] [--json] [--randomness] [--forms]

The check (:func:`core.rules.secrets.find_secrets`) runs on every memory write (``/remember``,
each import line, each reflection candidate) and on each stored chat message once its answer
is stored. Timed per call, in microseconds (p50 / p95 of ``--repeat`` calls, after a warm-up),
on three texts with no secret (the common case: every detector runs to the end):

- ``short``: a 34-character memory;
- ``memory``: a 199-character memory (the longest a memory may be);
- ``message``: a 4,000-character chat message (prose, a URL, a code block with identifiers).

Variants, all in one process on the same texts:

- ``clean_text``: the text hygiene every write already pays (:func:`core.rules.text.clean_text`),
  the "no check" baseline;
- ``regex only``: the detect-secrets provider patterns alone (AWS, GitHub, Slack, Stripe, ...,
  private keys, JWTs, basic-auth URLs), without our keyed, natural-language and entropy rules;
- ``find_secrets``: the whole check.

``--randomness`` also measures how many random strings the entropy rule catches (3,000 each
of 20 and 40 base64 characters, with upper and lower case and a digit, seeded).

``--forms`` runs the labelled set ``tests/data/secret_forms.jsonl`` (chat texts with a
secret, each naming its form, and benign look-alikes: numbers, ids, order and phone numbers,
versions, commit hashes, dates, prices, ports) through the check as it is and through its
baseline in the same run, the detectors from before issue 36 (``since=0``): caught / missed
per form, false positives (benign texts that would be refused) and the cost per message
(mean microseconds over the set, and on ``message``).

``--locomo [DIR]`` also counts refusals on every utterance of the LoCoMo conversations (real chat
no one wrote for this check, so an outside false-positive count; skipped with a line when
the data is absent, ``bench/locomo.py``), for the baseline and the check as it is.

``--migration N`` times the upgrade that removes secrets stored before the check (SQLite
``m014_redact_secrets``) on a store of ``N`` memories (users of 100, one in 1,000 carrying a
key) and ``N / 5`` stored messages of 500 characters (one in 1,000 with a key), against
opening the same store with nothing to migrate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.synthetic import sentences
from core.rules.secrets import _Detector, _detectors, _find, _squashed, find_secrets, looks_random
from core.rules.text import clean_text
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory

SHORT = "The user prefers tabs over spaces."
MEMORY = (
    "The user's team deploys the billing service from the release-2024 branch every Friday "
    "at 16:00 CET, after the staging smoke tests in GitHub Actions pass and Dana, the team "
    "lead, approves it in chats."
)
_PARAGRAPH = (
    "I looked at the failing job again this morning. The retry logic in fetch_orders() "
    "gives up after three attempts, and the backoff starts at 250 ms, so a 2-second outage "
    "of the upstream API is enough to fail the whole nightly run. See "
    "https://github.com/acme/billing/blob/main/docs/RETRIES.md for the old design notes. "
)
_CODE = (
    "```python\n"
    "async def fetch_orders(client: httpx.AsyncClient, since: datetime) -> list[Order]:\n"
    "    for attempt in range(MAX_ATTEMPTS):\n"
    "        response = await client.get('/v2/orders', params={'since': since.isoformat()})\n"
    "        if response.status_code != 429:\n"
    "            return [Order.model_validate(o) for o in response.json()['orders']]\n"
    "        await asyncio.sleep(BACKOFF_S * 2**attempt)\n"
    "```\n"
)
MESSAGE = ((_PARAGRAPH + _CODE) * 10)[:4000]

TEXTS = {"short": SHORT, "memory": MEMORY, "message": MESSAGE}
_REGEX_KINDS = {
    "private key",
    "anthropic key",
    "openai key",
    "aws key",
    "github token",
    "gitlab token",
    "slack token",
    "stripe key",
    "discord token",
    "jwt",
    "basic-auth url",
}


def regex_only(text: str) -> int:
    """The provider patterns only (each behind its substring gate, as in the check)."""
    lowered = text.lower()
    return sum(
        1
        for d in _detectors()
        if d.kind in _REGEX_KINDS and d.applies(text, lambda: lowered)
        for _ in d.find(text)
    )


def clean(text: str) -> int:
    return len(clean_text(text, keep_newlines=True))


def secrets(text: str) -> int:
    _squashed.cache_clear()  # one message is checked once: no cache hit to time
    return len(find_secrets(text))


VARIANTS: dict[str, Callable[[str], int]] = {
    "clean_text": clean,
    "regex only": regex_only,
    "find_secrets": secrets,
}


def timed(fn: Callable[[str], int], text: str, repeat: int) -> tuple[float, float]:
    """(p50, p95) of one call in microseconds."""
    for _ in range(min(repeat, 200)):
        fn(text)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn(text)
        samples.append((time.perf_counter_ns() - start) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def randomness(n: int = 3000) -> dict[int, float]:
    """Share of random base64 strings (upper, lower case and a digit) the entropy rule
    catches, by length."""
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    entropy = Base64HighEntropyString().calculate_shannon_entropy
    rng = random.Random(26)
    alphabet = string.ascii_letters + string.digits + "+/"
    out = {}
    for length in (20, 24, 32, 40, 64):
        caught = drawn = 0
        while drawn < n:
            token = "".join(rng.choice(alphabet) for _ in range(length))
            if not (
                any(c.isdigit() for c in token)
                and any(c.isupper() for c in token)
                and any(c.islower() for c in token)
            ):
                continue
            drawn += 1
            caught += looks_random(token, entropy)
        out[length] = caught / n
    return out


FORMS = Path(__file__).resolve().parent.parent / "tests" / "data" / "secret_forms.jsonl"


def forms(repeat: int) -> dict[str, Any]:
    """The labelled set through the check and its pre-issue-36 baseline: per form caught and
    missed, benign false positives, and microseconds per text (mean over the set, p50 of
    ``repeat // 10`` calls on the 4,000-character ``message``)."""
    rows = [json.loads(line) for line in FORMS.read_text().splitlines() if line.strip()]
    now = _detectors()
    variants = {"baseline": tuple(d for d in now if d.since == 0), "now": now}
    out: dict[str, Any] = {}
    for name, detectors in variants.items():
        table: dict[str, dict[str, int]] = {}
        false_positives: dict[str, int] = {}
        for row in rows:
            kinds = {f.kind for f in _find(row["text"], detectors)}
            if row["secret"] is None:
                false_positives[row["kind"]] = false_positives.get(row["kind"], 0) + bool(kinds)
                continue
            cell = table.setdefault(row["secret"], {"caught": 0, "missed": 0})
            cell["caught" if kinds else "missed"] += 1
        benign = sum(r["secret"] is None for r in rows)
        texts = [r["text"] for r in rows]
        for text in texts:  # warm up
            _find(text, detectors)
        started = time.perf_counter_ns()
        for _ in range(max(repeat // 100, 3)):
            for text in texts:
                _find(text, detectors)
        per_text = (time.perf_counter_ns() - started) / 1000 / len(texts) / max(repeat // 100, 3)

        def call(text: str, d: tuple[_Detector, ...] = detectors) -> int:
            _squashed.cache_clear()  # one message is checked once: no cache hit to time
            return len(_find(text, d))

        p50, _ = timed(call, MESSAGE, max(repeat // 10, 50))
        out[name] = {
            "forms": table,
            "benign": benign,
            "false_positives": sum(false_positives.values()),
            "false_positives_by_kind": {k: v for k, v in false_positives.items() if v},
            "us_per_text": round(per_text, 1),
            "message_p50_us": round(p50, 1),
        }
    return out


def locomo_false_positives(data: Path | None = None) -> dict[str, Any] | None:
    """Utterances of the LoCoMo conversations that each variant would refuse (none holds a
    secret); None when the data is absent."""
    from bench.locomo import DEFAULT_DATA, LoCoMoMissing, load_all

    try:
        conversations = load_all(data or DEFAULT_DATA)
    except LoCoMoMissing:
        return None
    texts = [t.text for c in conversations for s in c.sessions for t in s.turns]
    now = _detectors()
    out: dict[str, Any] = {"utterances": len(texts)}
    for name, detectors in (("baseline", tuple(d for d in now if d.since == 0)), ("now", now)):
        kinds: dict[str, int] = {}
        for text in texts:
            for finding in _find(text, detectors):
                kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
        out[name] = kinds
    return out


def print_forms(result: dict[str, Any]) -> None:
    base, now = result["baseline"], result["now"]
    print(f"{'form':22} {'baseline caught/missed':>24} {'now caught/missed':>20}")
    for form in now["forms"]:
        b = base["forms"].get(form, {"caught": 0, "missed": 0})
        n = now["forms"][form]
        print(
            f"{form:22} {b['caught']:>14} / {b['missed']:<7} {n['caught']:>11} / {n['missed']:<7}"
        )
    for name, row in (("baseline", base), ("now", now)):
        rate = row["false_positives"] / row["benign"]
        print(
            f"{name:9} false positives {row['false_positives']} of {row['benign']} benign"
            f" ({rate:.1%}) {row['false_positives_by_kind'] or ''}; {row['us_per_text']} us per"
            f" labelled text, {row['message_p50_us']} us per 4,000-character message (p50)"
        )


async def migration(n: int) -> dict[str, Any]:
    """Seconds to open a store of ``n`` memories and ``n // 5`` messages with the secrets
    migration pending, and with nothing pending; what it removed."""
    key = "AKIA" + "Z7Q2XK4M9TBW3HJD"
    texts = sentences(n, seed=26)
    texts = [f"The user's key {i} is {key}." if i % 1000 == 0 else t for i, t in enumerate(texts)]
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/memory.db"
        store = await SQLiteStore.open(path, synchronous="normal")
        for u, start in enumerate(range(0, n, 100)):
            batch = [NewMemory(text=t) for t in texts[start : start + 100]]
            await store.add_many(user_key=f"cli:u{u}", memories=batch, dedupe=None)
        await store.close()
        body = MESSAGE[:480]
        conn = sqlite3.connect(path)
        conn.executemany(
            "INSERT INTO turns(conversation_key, user_key, role, text, origin, sent_at,"
            " created_at) VALUES (?, ?, 'user', ?, 'private', ?, ?)",
            [
                (f"dm:{i % 500}", f"cli:u{i % 500}", f"{body} {key if i % 1000 == 0 else i}",
                 "2026-12-01T00:00:00+00:00", "2026-12-01T00:00:00+00:00")
                for i in range(n // 5)
            ],
        )  # fmt: skip
        number = conn.execute(
            "SELECT number FROM schema_migrations WHERE name = 'm014_redact_secrets'"
        ).fetchone()[0]
        conn.execute("DELETE FROM schema_migrations WHERE number = ?", (number,))
        conn.commit()
        conn.close()
        started = time.perf_counter()
        store = await SQLiteStore.open(path, synchronous="normal", migrate=True)
        migrate_s = time.perf_counter() - started
        await store.close()
        started = time.perf_counter()
        store = await SQLiteStore.open(path, synchronous="normal")
        open_s = time.perf_counter() - started
        await store.close()
        conn = sqlite3.connect(path)
        left = conn.execute("SELECT count(*) FROM memories WHERE text LIKE ?", (f"%{key}%",))
        left_memories = left.fetchone()[0]
        left_turns = conn.execute(
            "SELECT count(*) FROM turns WHERE text LIKE ?", (f"%{key}%",)
        ).fetchone()[0]
        conn.close()
    return {
        "memories": n,
        "messages": n // 5,
        "migrate_s": round(migrate_s, 2),
        "open_s": round(open_s, 3),
        "secrets_left": left_memories + left_turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--randomness", action="store_true")
    parser.add_argument("--migration", type=int, default=0, metavar="N")
    parser.add_argument("--forms", action="store_true")
    parser.add_argument(
        "--locomo", nargs="?", const="", default=None, metavar="DIR", help="LoCoMo's folder"
    )
    args = parser.parse_args()
    find_secrets("warm up the detectors")  # detect-secrets is imported on first use
    assert all(not find_secrets(t) for t in TEXTS.values()), "a bench text holds a secret"
    assert len(MEMORY) == 199, len(MEMORY)
    results: dict[str, Any] = {}
    for name, text in TEXTS.items():
        repeat = args.repeat if len(text) < 1000 else max(args.repeat // 5, 100)
        results[name] = {
            "chars": len(text),
            **{
                v: dict(zip(("p50_us", "p95_us"), timed(fn, text, repeat), strict=True))
                for v, fn in VARIANTS.items()
            },
        }
    if args.randomness:
        results["randomness"] = randomness()
    if args.migration:
        results["migration"] = asyncio.run(migration(args.migration))
    if args.forms:
        results["forms"] = forms(args.repeat)
    if args.locomo is not None:
        results["locomo"] = locomo_false_positives(Path(args.locomo) if args.locomo else None)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'text':8} {'chars':>5}  " + "  ".join(f"{v:>22}" for v in VARIANTS))
    print(f"{'':8} {'':>5}  " + "  ".join(f"{'p50 / p95 us':>22}" for _ in VARIANTS))
    for name in TEXTS:
        row = results[name]
        cells = "  ".join(f"{row[v]['p50_us']:>10.1f} / {row[v]['p95_us']:<9.1f}" for v in VARIANTS)
        print(f"{name:8} {row['chars']:>5}  {cells}")
    if args.randomness:
        for length, share in results["randomness"].items():
            print(f"random base64 of {length} characters caught: {share:.1%}")
    if args.forms:
        print_forms(results["forms"])
    if args.locomo is not None:
        lo = results["locomo"]
        if lo is None:
            print("LoCoMo: data absent, skipped (bench/locomo.py says where it goes)")
        else:
            print(
                f"LoCoMo: findings in {lo['utterances']:,} utterances with no secret:"
                f" baseline {lo['baseline'] or 0}, now {lo['now'] or 0}"
            )
    if args.migration:
        m = results["migration"]
        print(
            f"migration on {m['memories']:,} memories and {m['messages']:,} messages:"
            f" {m['migrate_s']} s (opening with nothing to migrate: {m['open_s']} s),"
            f" secrets left: {m['secrets_left']}"
        )


if __name__ == "__main__":
    main()
