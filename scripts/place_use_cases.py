"""Write the place rule's labelled use cases into core/data/use_cases.jsonl (issue 35).

    python scripts/place_use_cases.py

Every pair (where learned, where asked) across a Slack DM, a group DM, a private channel, a
public channel, another workspace's public channel, a Discord DM, guild A and guild B (the
pairs one person can meet: Slack and Discord keys differ), five memories each: 170 cases,
every third held out. Each case's user has the memory learned there (``t``), two memories
learned where the question is asked (usable there by definition) and one learned in their
own DM (``dm``); the memory is in the prompt exactly when docs/privacy.md's table says: in
these places, when asked in the owner's DM or where it was learned (:func:`expected`, written
from the table, not from the code; checked against :func:`core.rules.places.usable` when the
cases are written). Replaces the earlier place
cases (category starting with ``places:``), keeps every other case as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.rules.places import usable
from core.types import Place

DATA = Path(__file__).resolve().parent.parent / "core" / "data" / "use_cases.jsonl"

SLACK = {
    "slack DM": Place("slack", "dm", "T1", "D1"),
    "slack group DM": Place("slack", "group_dm", "T1", "G1"),
    "slack private channel": Place("slack", "private_channel", "T1", "C2"),
    "slack public channel": Place("slack", "public_channel", "T1", "C1"),
    "another workspace": Place("slack", "public_channel", "T2", "C9"),
}
DISCORD = {
    "discord DM": Place("discord", "dm", None, "11"),
    "guild A": Place("discord", "public_channel", "100", "101"),
    "guild B": Place("discord", "public_channel", "200", "201"),
}
TOPICS = [
    ("The user is in recovery from alcohol addiction.", "fact", "general",
     "Can you suggest a drink for the team party?"),
    ("The user is interviewing for a job at another company.", "context", "workflow",
     "How should I plan my week around the interviews?"),
    ("The user leads Project Falcon, the billing rewrite.", "fact", "workflow",
     "Who leads the billing rewrite?"),
    ("The user's daughter has a peanut allergy.", "fact", "general",
     "What snacks should I bring to the picnic?"),
    ("The user prefers answers in bullet points.", "preference", "communication",
     "Summarise the release notes for me."),
]  # fmt: skip
FILLERS = [
    ("The user writes Go at work.", "fact", "code"),
    ("The user uses Neovim.", "fact", "tools"),
]
DM_FACT = ("The user has a dentist appointment on Friday.", "context", "general")


def as_json(place: Place) -> dict[str, str | None]:
    return {
        "platform": place.platform,
        "kind": place.kind,
        "workspace": place.workspace,
        "channel": place.channel,
    }


def memory(key: str, text: str, kind: str, category: str, place: Place) -> dict[str, object]:
    return {
        "key": key, "text": text, "kind": kind, "category": category,
        "origin": "private" if place.kind == "dm" else "shared", "owner": "self",
        "superseded_by": None, "place": as_json(place),
    }  # fmt: skip


def expected(learned_name: str, asked_name: str, asked: Place) -> bool:
    """docs/privacy.md's table for these eight places: the owner's DM sees everything; a
    group DM, a private channel, a public channel (of one workspace or guild) only what was
    learned there; every pair here that is not the same place is a different one."""
    return asked.kind == "dm" or asked_name == learned_name


def cases() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    n = 0
    for places in (SLACK, DISCORD):
        owner_dm = next(p for p in places.values() if p.kind == "dm")
        for learned_name, learned in places.items():
            for asked_name, asked in places.items():
                for text, kind, category, question in TOPICS:
                    n += 1
                    used = expected(learned_name, asked_name, asked)
                    assert used == usable(learned, asked), (learned_name, asked_name)
                    mems = [memory("t", text, kind, category, learned)]
                    mems += [memory(f"a{i}", *f, asked) for i, f in enumerate(FILLERS)]
                    mems.append(memory("dm", *DM_FACT, owner_dm))
                    must_not = [] if used else ["t"]
                    if not usable(owner_dm, asked):
                        must_not.append("dm")
                    out.append(
                        {
                            "id": f"places-{n:03d}",
                            "split": "held_out" if n % 3 == 0 else "tuning",
                            "category": f"places: learned in {learned_name}",
                            "lang": "en",
                            "memories": mems,
                            "message": {
                                "text": question,
                                "origin": "private" if asked.kind == "dm" else "shared",
                                "place": as_json(asked),
                                "asked_in": asked_name,
                            },
                            "must": ["t"] if used else [],
                            "must_not": must_not,
                        }
                    )
    return out


def main() -> None:
    kept = [
        line
        for line in DATA.read_text(encoding="utf-8").splitlines()
        if line.strip() and not json.loads(line)["category"].startswith("places:")
    ]
    new = [json.dumps(c, ensure_ascii=False) for c in cases()]
    DATA.write_text("\n".join(kept + new) + "\n", encoding="utf-8")
    print(f"{len(new)} place cases written ({len(kept)} others kept) to {DATA}")


if __name__ == "__main__":
    main()
