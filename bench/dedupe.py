"""Dedupe on the labelled pairs: the rule against plain Jaccard at 0.6 / 0.7 / 0.8.

    python bench/dedupe.py [--json] [--threshold 0.7] [--misses] [--baseline [REF]]

Prints the table of :func:`core.evaluation.dedupe.format_table` (false merges and duplicate recall
per method, for the tune and holdout splits and all pairs); with ``--json`` also the report
as one JSON object on the last line. Reads the pairs packaged with :mod:`core`.
``--baseline`` adds the rule of commit REF (default: where this branch left ``main``) on the
same pairs, in the same run, as the row ``before@<threshold>``: its ``core/`` package is read
with ``git archive`` into a temporary directory and asked for its outcome on every pair.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.baseline import REPO, merge_base
from core.evaluation.dedupe import Judge, LabelledPair, evaluate, format_table, load_pairs
from core.rules.dedupe import DEFAULT_THRESHOLD

# Run inside the baseline's ``core``: reads [[a, b], ...] on stdin, prints the outcomes.
_JUDGE_ALL = """
import json, sys
from core.rules.dedupe import judge
pairs = json.load(sys.stdin)
print(json.dumps([judge(b, a, float(sys.argv[1])).outcome for a, b in pairs]))
"""


def baseline_method(ref: str, pairs: list[LabelledPair], threshold: float) -> Judge:
    """The rule of commit ``ref`` as a pair judge, its outcomes computed once for ``pairs``
    (a pair outside them raises KeyError). Raises CalledProcessError when git or the
    baseline fails."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, "core"],
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix="selfmind-dedupe-base-") as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        done = subprocess.run(
            [sys.executable, "-c", _JUDGE_ALL, str(threshold)],
            input=json.dumps([[p.a, p.b] for p in pairs]),
            check=True,
            capture_output=True,
            text=True,
            cwd=tmp,
        )
    said = dict(zip(((p.a, p.b) for p in pairs), json.loads(done.stdout), strict=True))
    return lambda a, b: said[(a, b)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="also print the report as JSON")
    parser.add_argument(
        "--threshold", type=float, default=DEFAULT_THRESHOLD, help="the rule's screen"
    )
    parser.add_argument("--misses", action="store_true", help="list the rule's errors (tune)")
    # --baseline [REF]: also score REF's rule (default: the merge base with main)
    parser.add_argument("--baseline", nargs="?", const="", default=None, metavar="REF")
    args = parser.parse_args(argv)
    pairs = load_pairs()
    also = []
    if args.baseline is not None:
        ref = args.baseline or merge_base()
        also.append((f"before@{args.threshold:g}", baseline_method(ref, pairs, args.threshold)))
    report = evaluate(pairs, threshold=args.threshold, also=also)
    print(format_table(report))
    if args.baseline is not None:
        print(f"before = the rule of commit {args.baseline or merge_base()}")
    if args.misses:
        rule = report.score(report.methods[0], "tune")
        by_id = {p.id: p for p in pairs}
        for kind, ids in (("false merge", rule.false_merge_ids), ("missed", rule.missed_ids)):
            for i in ids:
                p = by_id[i]
                print(f"{kind} #{i} [{p.case}] {p.a!r} / {p.b!r}")
    if args.json:
        print(json.dumps(report.as_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
