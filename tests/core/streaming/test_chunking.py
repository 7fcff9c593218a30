"""Splitting Markdown into messages: fences, boundaries, limits, and Slack tables."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.streaming.chunking import (
    START,
    Chunk,
    chunk_markdown,
    fence_at_end,
    locate,
    slack_markdown,
    split_message,
)

FENCE_OPENING = re.compile(r"(`{3,}|~{3,})[^`\n]*\n")
FENCE_CLOSING = re.compile(r"\n?(`{3,}|~{3,})")


def check_chunks(text: str, chunks: list[Chunk], max_chars: int, reserve: int = 0) -> None:
    """Every invariant a split must keep; shared with the property tests."""
    assert "".join(chunk.body for chunk in chunks) == text
    position = 0
    for index, chunk in enumerate(chunks):
        assert chunk.start == position
        position += len(chunk.body)
        assert len(chunk.text) + reserve <= max_chars, (index, len(chunk.text))
        assert chunk.prefix == "" or FENCE_OPENING.fullmatch(chunk.prefix)
        assert chunk.suffix == "" or FENCE_CLOSING.fullmatch(chunk.suffix)
        if index < len(chunks) - 1:
            assert chunk.body, "no empty message in the middle"
            # Each closed message is balanced on its own: no code block left open.
            assert fence_at_end(chunk.text, START) is None, chunk.text
            # A message that closes a fence is followed by one that reopens the same one.
            if chunk.suffix:
                fence_line = chunks[index + 1].prefix
                assert fence_line
                assert fence_line.strip() == locate(text, START, position).fence.opening  # type: ignore[union-attr]


def code_block(language: str, lines: int) -> str:
    body = "".join(f"    value_{i} = compute({i}, 'data')  # step {i}\n" for i in range(lines))
    return f"```{language}\n{body}```\n"


def test_short_text_is_one_chunk_unchanged() -> None:
    text = "Hello **world**.\n\n```python\nprint(1)\n```\n"
    assert chunk_markdown(text, 2000) == [Chunk("", text, "", 0)]


def test_code_block_split_is_closed_and_reopened_with_its_language() -> None:
    text = "Here is the script:\n\n" + code_block("python", 60) + "\nThat is all.\n"
    chunks = chunk_markdown(text, 1000)
    check_chunks(text, chunks, 1000)
    assert len(chunks) >= 3
    assert chunks[0].suffix == "```"
    assert chunks[1].prefix == "```python\n"
    # Inside code the cut falls on line boundaries, never mid-statement.
    for chunk in chunks[:-1]:
        assert chunk.body.endswith("\n")
    assert chunks[-1].suffix == ""


def test_tilde_fence_and_long_fence_are_reopened_verbatim() -> None:
    text = "~~~~ rust\n" + "let x = 1;\n" * 300 + "~~~~\n"
    chunks = chunk_markdown(text, 500)
    check_chunks(text, chunks, 500)
    assert chunks[1].prefix == "~~~~ rust\n"
    assert chunks[0].suffix == "~~~~"


def test_paragraph_boundary_is_preferred_over_line_and_word() -> None:
    first = "word " * 100  # 500 chars, one line
    text = first + "\n\n" + "second line one\nsecond line two " + "more " * 200
    chunks = chunk_markdown(text, 800)
    check_chunks(text, chunks, 800)
    assert chunks[0].body == first + "\n\n"


def test_line_boundary_beats_word_boundary() -> None:
    text = "alpha " * 80 + "\n" + "beta " * 300
    chunks = chunk_markdown(text, 700)
    assert chunks[0].body == "alpha " * 80 + "\n"


def test_word_boundary_when_no_line_break() -> None:
    text = "lorem ipsum " * 300
    chunks = chunk_markdown(text, 500)
    check_chunks(text, chunks, 500)
    for chunk in chunks[:-1]:
        assert chunk.body.endswith(" ")


def test_boundary_too_early_loses_to_a_hard_split() -> None:
    # The only space is at the start: cutting there would leave a 6-char message.
    text = "short " + "x" * 3000
    chunks = chunk_markdown(text, 1000)
    check_chunks(text, chunks, 1000)
    assert len(chunks[0].body) == 1000


def test_single_overlong_word_is_hard_split() -> None:
    url = "https://example.com/" + "a" * 5000
    chunks = chunk_markdown(url, 2000)
    check_chunks(url, chunks, 2000)
    assert [len(chunk.body) for chunk in chunks] == [2000, 2000, 1020]


def test_hard_split_keeps_emoji_sequences_whole() -> None:
    family = "👨‍👩‍👧‍👦"  # 7 code points joined by ZWJ
    text = family * 400
    chunks = chunk_markdown(text, 500)
    check_chunks(text, chunks, 500)
    for chunk in chunks:
        assert len(chunk.body) % len(family) == 0
        assert not chunk.body.startswith("\u200d")


def test_hard_split_keeps_flags_and_combining_marks_whole() -> None:
    text = "🇫🇷" * 300 + "e\u0301" * 300
    chunks = chunk_markdown(text, 101)
    check_chunks(text, chunks, 101)
    for chunk in chunks[1:]:
        assert chunk.body[0] != "\u0301"
    for chunk in chunks:
        flags = [ch for ch in chunk.body if 0x1F1E6 <= ord(ch) <= 0x1F1FF]
        assert len(flags) % 2 == 0


def test_cjk_splits_after_punctuation() -> None:
    sentence = "これは長い日本語の文章です。"  # 14 chars, ends with a full stop
    text = sentence * 100
    chunks = chunk_markdown(text, 500)
    check_chunks(text, chunks, 500)
    for chunk in chunks[:-1]:
        assert chunk.body.endswith("。")


def test_reserve_is_kept_free() -> None:
    text = "word " * 2000
    chunks = chunk_markdown(text, 1000, reserve=40)
    check_chunks(text, chunks, 1000, reserve=40)
    assert max(len(chunk.text) for chunk in chunks) > 900


def test_cut_never_leaves_an_empty_code_block() -> None:
    text = "intro " * 150 + "\n```python\n" + "x = 1\n" * 200 + "```\n"
    for chunk in chunk_markdown(text, 1000):
        assert not chunk.text.rstrip().endswith("```python\n```")
        assert not chunk.body.endswith("```python\n")


def test_split_message_counts_the_temporary_fence() -> None:
    # Fits alone, but a message that ends inside a code block needs its closing fence too.
    text = "```\n" + "a" * 90
    assert split_message(text, START, 100) is None
    assert split_message(text + "b" * 5, START, 100) is not None


def test_unclosed_fence_at_end_is_kept_as_is() -> None:
    text = "```js\n" + "let a = 1;\n" * 100
    chunks = chunk_markdown(text, 400)
    check_chunks(text, chunks, 400)
    assert chunks[-1].suffix == ""
    assert fence_at_end(chunks[-1].text, START) is not None


def test_inline_triple_backticks_are_not_a_fence() -> None:
    text = "Use ```x``` inline.\n" * 100
    chunks = chunk_markdown(text, 300)
    check_chunks(text, chunks, 300)
    assert all(chunk.prefix == "" and chunk.suffix == "" for chunk in chunks)


def test_a_cut_never_turns_mid_line_backticks_into_a_fence() -> None:
    # Found by the property test below: "aaa```" mid-line is text, but a hard cut just before
    # the backticks made the next message begin with a fence line that opened a code block.
    text = "a" * 100 + "```\nthe\n\n" + "b" * 100 + "the\n\n"
    for max_chars in range(60, 140):
        check_chunks(text, chunk_markdown(text, max_chars), max_chars)
    inside = "```\ncode " + "c" * 90 + "```\nmore\n```\n"
    for max_chars in range(60, 140):
        check_chunks(inside, chunk_markdown(inside, max_chars), max_chars)


@pytest.mark.parametrize(("max_chars", "reserve"), [(31, 0), (100, 70), (100, -1)])
def test_impossible_limits_are_refused(max_chars: int, reserve: int) -> None:
    with pytest.raises(ValueError, match="max_chars"):
        chunk_markdown("text", max_chars, reserve=reserve)


WORDS = st.sampled_from(
    [
        "the",
        "memory",
        "Claude",
        "naïve",
        "日本語の文章",
        "中文。",
        "emoji 🎉",
        "👩‍💻",
        "🇯🇵",
        "x" * 40,
    ]
)


@st.composite
def markdown_answers(draw: st.DrawFn) -> str:
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["paragraph", "code", "list", "blank", "longword"]))
        if kind == "paragraph":
            words = draw(st.lists(WORDS, min_size=1, max_size=80))
            parts.append(" ".join(words) + draw(st.sampled_from(["\n\n", "\n", " ", ""])))
        elif kind == "code":
            language = draw(st.sampled_from(["", "python", "js", "c++"]))
            lines = draw(st.lists(st.text("abc xyz=(){};日本🎉", max_size=90), max_size=60))
            fence = draw(st.sampled_from(["```", "~~~", "````"]))
            closed = draw(st.booleans())
            parts.append(f"{fence}{language}\n" + "".join(f"{line}\n" for line in lines))
            if closed:
                parts.append(f"{fence}\n")
        elif kind == "list":
            items = draw(st.lists(st.lists(WORDS, min_size=1, max_size=12), max_size=15))
            parts.append("".join("- " + " ".join(item) + "\n" for item in items))
        elif kind == "blank":
            parts.append("\n" * draw(st.integers(1, 4)))
        else:
            parts.append(draw(st.text("abcdef🎉中", min_size=50, max_size=900)))
    return "".join(parts)


@settings(max_examples=150, deadline=None)
@given(
    text=markdown_answers(),
    max_chars=st.integers(120, 900),
    reserve=st.integers(0, 40),
)
def test_chunks_reassemble_exactly(text: str, max_chars: int, reserve: int) -> None:
    check_chunks(text, chunk_markdown(text, max_chars, reserve=reserve), max_chars, reserve)


def test_slack_markdown_wraps_a_table_in_a_code_block() -> None:
    text = "Results:\n\n| name | score |\n| --- | ---: |\n| ada | 3 |\n| bob | 5 |\n\nDone."
    assert slack_markdown(text) == (
        "Results:\n\n```\n| name | score |\n| --- | ---: |\n| ada | 3 |\n| bob | 5 |\n```\n\nDone."
    )


def test_slack_markdown_table_without_outer_pipes_at_end_of_text() -> None:
    text = "a | b\n:-- | --\n1 | 2"
    assert slack_markdown(text) == "```\na | b\n:-- | --\n1 | 2\n```"


def test_slack_markdown_wraps_a_table_continued_from_a_previous_message() -> None:
    text = "| 7 | 8 |\n| 9 | 10 |\nend"
    assert slack_markdown(text) == "```\n| 7 | 8 |\n| 9 | 10 |\n```\nend"


def test_slack_markdown_leaves_other_markdown_and_code_alone() -> None:
    text = (
        "**bold**, _it_, [link](https://x.org)\n- item | with pipe\n\n"
        "```\n| not | a table |\n|---|---|\n```\n`a | b`\n"
    )
    assert slack_markdown(text) == text


def test_slack_markdown_wraps_each_of_two_tables() -> None:
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    wrapped = slack_markdown(f"{table}\n\ntext\n\n{table}")
    assert wrapped == f"```\n{table}\n```\n\ntext\n\n```\n{table}\n```"
