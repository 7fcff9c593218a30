"""bench/load.py's channel mode: the on/off summary is the median of each per configuration,
and a configuration without both is left out."""

from __future__ import annotations

from typing import Any

from bench.load import memory_ratios, print_memory_ratios


def row(memory: str, cpu: float, code: str = "this", store: str = "sqlite/full") -> dict[str, Any]:
    return {
        "code": code,
        "users": 200,
        "store": store,
        "procs": 1,
        "recall": "bm25",
        "memory": memory,
        "cpu_ms_turn": cpu,
    }


def test_memory_ratios_are_medians_per_configuration() -> None:
    rows = [
        row("off", 9.0), row("on", 11.0), row("off", 8.0), row("on", 10.0), row("off", 20.0),
        row("on", 12.0), row("off", 10.0, code="base"), row("on", 15.0, code="base"),
        row("off", 5.0, store="postgres"),
    ]  # fmt: skip
    by_code = {r["code"]: r for r in memory_ratios(rows)}
    assert set(by_code) == {"this", "base"}  # postgres has no on run: left out
    assert (by_code["this"]["off"], by_code["this"]["on"]) == (9.0, 11.0)
    assert round(by_code["this"]["ratio"], 4) == round(11.0 / 9.0, 4)
    assert by_code["base"]["ratio"] == 1.5


def test_each_backend_is_judged_against_the_target(capsys: Any) -> None:
    rows = [
        row("off", 10.0), row("on", 11.0), row("off", 10.0, store="postgres"),
        row("on", 12.0, store="postgres"), row("off", 9.2, code="base"),
        row("on", 10.6, code="base"),
    ]  # fmt: skip
    by_store = {r["store"]: r for r in memory_ratios(rows) if r["code"] == "this"}
    assert by_store["sqlite/full"]["passed"] and not by_store["postgres"]["passed"]
    print_memory_ratios(rows)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert "1.152x, FAIL" in lines[2]  # over by less than the second decimal shows
    assert "sqlite/full" in lines[0] and "1.100x, pass (target 1.15x)" in lines[0]
    assert "postgres" in lines[1] and "1.200x, FAIL (target 1.15x)" in lines[1]
    assert "off 10.0 ms (median 10.0), on 12.0 ms" in lines[1]
