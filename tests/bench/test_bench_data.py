"""The LoCoMo benchmarks without their data: one line saying where LoCoMo comes from, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.parametrize("script", ["retrieval.py", "replay_locomo.py", "cleanup.py"])
def test_a_bench_without_locomo_says_where_it_comes_from(tmp_path: Path, script: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / script), "--data", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    err = proc.stderr
    assert err.startswith("error: no LoCoMo conversations") and err.count("\n") == 1, err
    for part in ("Maharana et al. 2024", "CC BY-NC 4.0", "--data DIR", str(tmp_path / "none")):
        assert part in err
