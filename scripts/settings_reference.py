"""The configuration reference: one table row per setting of ``core.settings.Settings``.

Variables and defaults come from the settings class itself, what each does from the comment
above it in ``.env.example`` (which lists every field: tests/core/test_settings.py). The
table lives in docs/configuration.md between two markers; ``python
scripts/settings_reference.py`` rewrites it, and tests/test_docs.py fails when it differs
from what this script makes, so the page cannot drift from the code.
"""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.settings import Settings, env_name  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"
BEGIN = "<!-- settings reference: made by scripts/settings_reference.py; do not edit -->"
END = "<!-- end of the settings reference -->"


def comments() -> dict[str, str]:
    """Each variable of ``.env.example`` and the comment just above it (a comment above
    several variables in a row belongs to each of them)."""
    found: dict[str, str] = {}
    above: list[str] = []
    after_variable = False
    for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines():
        if line.startswith("# ---") or not line.strip():
            above, after_variable = [], False
        elif line.startswith("#"):
            if after_variable:
                above, after_variable = [], False
            above.append(line.lstrip("#").strip())
        elif "=" in line:
            found[line.split("=", 1)[0].strip()] = " ".join(above)
            after_variable = True
    return found


def default(field: str) -> str:
    info = Settings.model_fields[field]
    value = info.default
    if value is None or value == ():
        return "(not set)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def values(field: str) -> str:
    annotation = Settings.model_fields[field].annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    kind = args[0] if len(args) == 1 else annotation
    if typing.get_origin(kind) is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(kind))
    names = {int: "integer", float: "number", bool: "true or false", str: "text"}
    if kind in names:
        return names[kind]  # type: ignore[index]
    if "SecretStr" in str(kind):
        return "secret"
    if "tuple" in str(kind):
        return "comma-separated list"
    return str(kind)


def table() -> str:
    notes = comments()
    lines = [
        BEGIN,
        "",
        "| variable | default | values | what it does |",
        "|---|---|---|---|",
    ]
    for field in Settings.model_fields:
        name = env_name(field)
        text = re.sub(r"\s+", " ", notes.get(name, "")).replace("|", "\\|")
        lines.append(f"| `{name}` | {default(field)} | {values(field)} | {text} |")
    lines += ["", END]
    return "\n".join(lines)


def page_with_table(page: str) -> str:
    """``page`` with the text between the markers replaced by :func:`table`."""
    start, end = page.index(BEGIN), page.index(END) + len(END)
    return page[:start] + table() + page[end:]


if __name__ == "__main__":
    PAGE.write_text(page_with_table(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote the settings reference into {PAGE.relative_to(ROOT)}")
