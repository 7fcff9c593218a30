"""Whose fact it is: the offline rule (:func:`core.rules.about.whose`) on the labelled cases.

    python bench/about.py [--json]

Prints :func:`core.evaluation.about.format_table` (share right on whose fact it is and on the
stored text, per split, the held-out third apart, and per kind of case); with ``--json``
also the report as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.evaluation.about import evaluate, format_table, load_cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="also print the report as JSON")
    args = parser.parse_args(argv)
    report = evaluate(load_cases())
    print(format_table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
