"""The terminal's input history is per user, and forgetting reaches it (issue 26): ``/forget
ID`` and ``memories forget ID`` remove the entries carrying the memory's text, ``/forget all``
and ``memories forget --all`` the user's file, never another user's (both backends: the
files live beside the SQLite file, or in ``~/.selfmind`` for PostgreSQL)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bots.cli import app
from bots.terminal.history import (
    LEGACY_FILE,
    carries,
    history_file,
    prepare_history,
    remove_entries,
    terminal_folder,
)
from bots.terminal.tty import ChatFiles, PrivateHistory

runner = CliRunner()
CAT = "The user's cat is called Miso."
OSLO = "The user lives in Oslo."


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def typed(path: Path, *entries: str) -> PrivateHistory:
    """The history file ``path`` as the interactive chat leaves it after ``entries``."""
    prepare_history(path)
    history = PrivateHistory(path)
    for entry in entries:
        history.append_string(entry)
    return history


def entries(path: Path) -> list[str]:
    return list(reversed(list(PrivateHistory(path).load_history_strings())))


def cli(db_url: str, *args: str, stdin: str | None = None) -> str:
    result = runner.invoke(app, ["--db", db_url, *args], input=stdin)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_each_user_has_a_file_of_their_own(tmp_path: Path) -> None:
    names = {history_file(tmp_path, k).name for k in ("cli:a/b", "cli:a_b", "cli:A_b", "cli:")}
    assert len(names) == 4
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", n) for n in names)
    long = history_file(tmp_path, "cli:" + "x" * 500 + "/../../etc")
    assert long.parent == tmp_path / "history" and len(long.name) < 80


def test_removing_entries_keeps_the_rest_loadable_and_private(tmp_path: Path) -> None:
    path = tmp_path / "history" / "alice"
    history = typed(
        path,
        f"/remember {CAT}",
        "hello",
        "my notes:\nthe user's   CAT is called miso\nend",  # over lines, case, spacing
        f"/remember {OSLO}",
        "/forget 1",
    )
    size = path.stat().st_size
    history.forget([CAT])
    assert entries(path) == ["hello", f"/remember {OSLO}", "/forget 1"]
    assert history.get_strings() == ["hello", f"/remember {OSLO}", "/forget 1"]  # Up too
    assert "Miso" not in path.read_text() and path.stat().st_size < size
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert remove_entries(path, ["nothing like it"]) == 0
    assert remove_entries(tmp_path / "missing", [CAT]) == 0
    assert not carries("hello", [""]) and carries(f"/remember  {CAT.upper()}", [CAT])
    history.forget(None)
    assert not path.exists() and history.get_strings() == []


def test_chat_files_are_per_user_and_the_shared_file_of_before_goes(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/data/m.db"
    (tmp_path / "data").mkdir()
    legacy = tmp_path / "data" / LEGACY_FILE
    legacy.write_text(f"\n# 2026-12-01\n+/remember {CAT}\n")  # every user's lines, mixed
    alice, bob = ChatFiles.for_db(db, "cli:alice"), ChatFiles.for_db(db, "cli:bob")
    assert alice.history != bob.history and alice.log == bob.log
    alice.history.parent.mkdir(mode=0o755)
    alice.history.write_text("\n# t\n+old\n")
    alice.history.chmod(0o644)  # made private even if it was not
    alice.prepare()
    assert mode(alice.history) == 0o600 and mode(alice.history.parent) == 0o700
    assert mode(alice.log) == 0o600
    assert entries(alice.history) == ["old"]  # kept, not truncated
    assert not legacy.exists()


def test_forget_reaches_only_the_users_own_history(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    folder = terminal_folder(db_url)
    alice, bob = history_file(folder, "cli:alice"), history_file(folder, "cli:bob")
    typed(alice, f"/remember {CAT}", "what is my cat called? Miso, right?", f"/remember {OSLO}")
    typed(bob, f"/remember {CAT}", "hi")  # the same sentence, another user's
    (folder / LEGACY_FILE).write_text(f"\n# t\n+/remember {CAT}\n")

    # The piped chat (a script) forgets as the interactive one does.
    out = cli(db_url, "chat", "--user", "alice", stdin=f"/remember {CAT}\n/remember {OSLO}\n")
    cat_id, oslo_id = (int(n) for n in re.findall(r"Remembered \(#(\d+)\)", out))
    cli(db_url, "chat", "--user", "alice", stdin=f"/forget {cat_id}\n")
    assert entries(alice) == ["what is my cat called? Miso, right?", f"/remember {OSLO}"]
    assert entries(bob) == [f"/remember {CAT}", "hi"]
    assert not (folder / LEGACY_FILE).exists()
    assert mode(alice) == 0o600

    cli(db_url, "memories", "forget", "--user", "alice", str(oslo_id))
    assert entries(alice) == ["what is my cat called? Miso, right?"]

    cli(db_url, "chat", "--user", "alice", stdin="/remember The user sails.\n/forget all\n")
    assert not alice.exists() and entries(bob) == [f"/remember {CAT}", "hi"]
    typed(alice, "later")
    cli(db_url, "memories", "remember", "--user", "bob", "The user rows.")
    cli(db_url, "memories", "forget", "--user", "bob", "--all", "--yes")
    assert not bob.exists() and entries(alice) == ["later"]


def test_forget_removes_the_remember_that_stored_it_in_other_words(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/remember my bike is a red Brompton`` stores "The user's bike is a red Brompton.":
    ``/forget`` of that memory takes the typed line out of the history too, whatever
    wording ``/remember`` stored (and only that line)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    path = history_file(terminal_folder(db_url), "cli:alice")
    typed(path, "/remember my bike is a red Brompton", "/remember I prefer tea", "hello")
    out = cli(db_url, "chat", "--user", "alice", stdin="/remember my bike is a red Brompton\n")
    [bike] = re.findall(r"Remembered \(#(\d+)\)", out)
    assert "The user's bike is a red Brompton." in out  # stored in other words
    cli(db_url, "chat", "--user", "alice", stdin=f"/forget {bike}\n")
    assert entries(path) == ["/remember I prefer tea", "hello"]
    assert "Brompton" not in path.read_text()
    assert carries("/REMEMBER   my bike is a red  Brompton", ["The user's bike is a red Brompton."])
    assert not carries("/remember my bike is blue", ["The user's bike is a red Brompton."])
