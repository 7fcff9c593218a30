"""``selfmind eval dedupe``: the labelled pairs scored offline, the same report as the bench."""

from __future__ import annotations

import json
import subprocess
import sys

from core.evaluation.dedupe import evaluate, load_pairs
from tests.conftest import REPO_ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bots.cli", "eval", "dedupe", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        check=False,
    )


def test_eval_dedupe_prints_the_bench_report() -> None:
    done = _run("--json", "--threshold", "0.5")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("method")
    assert any(line.startswith("rule@0.5") for line in lines)
    assert json.loads(lines[-1]) == evaluate(load_pairs(), threshold=0.5).as_dict()
    rule_all = next(
        score
        for score in json.loads(lines[-1])["scores"]
        if score["method"] == "rule@0.5" and score["split"] == "all"
    )
    assert rule_all["false_merges"] == 0


def test_eval_dedupe_refuses_a_threshold_outside_the_unit_interval() -> None:
    for bad in ("0", "1.5", "-0.2"):
        done = _run("--threshold", bad)
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"error: --threshold must be in (0, 1], got {float(bad)}"
        ]
        assert done.stdout == ""
    assert _run("--threshold", "abc").returncode == 2
