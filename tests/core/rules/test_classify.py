"""The offline labels of a memory, first person made third, and memory questions."""

from __future__ import annotations

import pytest

from core.rules.classify import classify, third_person
from core.rules.memory_questions import is_memory_question


@pytest.mark.parametrize(
    ("text", "kind", "category"),
    [
        ("The user prefers concise answers in bullet points.", "preference", "communication"),
        ("The user prefers tabs over spaces.", "preference", "code"),
        ("The user never uses light mode in the editor.", "preference", "tools"),
        ("The user writes Go and deploys with Kubernetes.", "fact", "code"),
        ("The user lives in Lisbon.", "context", "general"),
        ("The user is allergic to peanuts.", "context", "general"),
        ("The user's dog is called Rex.", "context", "general"),
        ("The user's team releases on Thursdays.", "context", "workflow"),
        ("The user no longer uses vim.", "correction", "tools"),
        ("The user moved to Berlin in 2026.", "correction", "general"),
        ("The user bought a blue umbrella.", "fact", "general"),
        ("", "fact", "general"),
        ("Ich trinke gern Tee.", "fact", "general"),
    ],
)
def test_classify(text: str, kind: str, category: str) -> None:
    assert classify(text) == (kind, category)


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("I prefer tabs over spaces", "The user prefers tabs over spaces."),
        ("I'm allergic to peanuts", "The user is allergic to peanuts."),
        ("I am a nurse.", "The user is a nurse."),
        ("I've two cats", "The user has two cats."),
        ("I'd rather get the code first", "The user would rather get the code first."),
        ("My dog is called Rex", "The user's dog is called Rex."),
        ("I never use light mode", "The user never uses light mode."),
        ("I don't like emoji", "The user doesn't like emoji."),
        ("I moved to Berlin", "The user moved to Berlin."),
        ("I need short answers", "The user needs short answers."),
        ("I watch my weight", "The user watches their weight."),
        ("i use Go", "The user uses Go."),
        ("I study physics", "The user studies physics."),
        # Left as typed: not safe to rewrite.
        ("I told you so", "I told you so"),
        ('I use "vim" as Bram said', 'I use "vim" as Bram said'),
        ("I think we should ship", "I think we should ship"),
        ("Iris is my cat", "Iris is my cat"),
        ("I", "I"),
        ("I going home", "I going home"),
        ("The user prefers tea.", "The user prefers tea."),
        ("Ich mag Tee", "Ich mag Tee"),
    ],
)
def test_third_person(typed: str, stored: str) -> None:
    assert third_person(typed) == stored


@pytest.mark.parametrize(
    "text",
    [
        "What do you remember about me?",
        "what do you know about me",
        "What have you learned about me so far?",
        "Summarize my memories please",
        "Tell me what you know about me.",
        "What do you have saved about me?",
        "Was weißt du über mich?",
        "Was hast du dir über mich gemerkt?",
        "Woran erinnerst du dich?",
        "Que sais-tu de moi ?",
        "Qu’est-ce que tu sais sur moi ?",
        "De quoi te souviens-tu ?",
        "¿Qué sabes de mí?",
        "¿Qué recuerdas de mí?",
        "O que você sabe sobre mim?",
        "O que você lembra de mim?",
        "私について何を覚えていますか？",
        "私のことを何か知っていますか",
        "私について知っていることを教えて",
    ],
)
def test_memory_questions(text: str) -> None:
    assert is_memory_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "What do you know about Rust?",
        "How do I set up an nginx reverse proxy?",
        "Do you remember the capital of France?",
        "Was weißt du über Python?",
        "Que sais-tu de Python ?",
        "私はPythonが好きです",
        "",
        "what about me " * 1000,
    ],
)
def test_not_memory_questions(text: str) -> None:
    assert not is_memory_question(text)
