"""Dedupe on the labelled pairs: the rule against plain Jaccard at 0.6 / 0.7 / 0.8.

    python bench/dedupe.py [--json] [--threshold 0.7]

Prints the table of :func:`core.evaluation.dedupe.format_table` (false merges and duplicate recall
per method, for the tune and holdout splits and all pairs); with ``--json`` also the report
as one JSON object on the last line. Reads the pairs packaged with :mod:`core`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.evaluation.dedupe import evaluate, format_table, load_pairs
from core.rules.dedupe import DEFAULT_THRESHOLD


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="also print the report as JSON")
    parser.add_argument(
        "--threshold", type=float, default=DEFAULT_THRESHOLD, help="the rule's screen"
    )
    parser.add_argument("--misses", action="store_true", help="list the rule's errors (tune)")
    args = parser.parse_args(argv)
    pairs = load_pairs()
    report = evaluate(pairs, threshold=args.threshold)
    print(format_table(report))
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
