"""``selfmind eval about``: the labelled cases of whose fact it is, scored offline, the same
report as ``bench/about.py``."""

from __future__ import annotations

import json
import subprocess
import sys

from core.evaluation.about import evaluate, load_cases
from tests.conftest import REPO_ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        check=False,
    )


def test_eval_about_prints_the_bench_report() -> None:
    done = _run("-m", "bots.cli", "eval", "about", "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].split() == ["n", "whose", "text", "both", "wrong"]
    assert any(line.startswith("holdout") for line in lines)
    report = json.loads(lines[-1])
    assert report == evaluate(load_cases())
    assert report["holdout"]["n"] >= 30
    bench = _run("bench/about.py", "--json")
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout.strip().splitlines()[-1]) == report


def test_eval_about_refuses_an_unknown_option() -> None:
    done = _run("-m", "bots.cli", "eval", "about", "--held-out")
    assert done.returncode != 0 and "--held-out" in done.stderr
