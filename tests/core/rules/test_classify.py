"""The offline labels of a memory, first person made third, and memory questions."""

from __future__ import annotations

import pytest

from core.memory.service import in_third_person
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
        # One-offs stay plain general facts: never carried into every prompt by the profile.
        ("The user will be out on Friday this week.", "fact", "general"),
        ("The user has a release review tomorrow.", "fact", "general"),
        ("The user wants to finish the report today.", "fact", "general"),
        ("The user is actually working from the Berlin office right now.", "fact", "general"),
        ("Please remind me to call Bob about the deploy.", "fact", "general"),
        ("Do I like Java?", "fact", "general"),
        ("Should the team switch to tabs?", "fact", "general"),
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
        # Irregular past tenses are not given an -s, nor are words that are no verb of "I".
        ("I told my boss", "The user told their boss."),
        ("I never said that", "The user never said that."),
        ("I sent the invoice", "The user sent the invoice."),
        ("I and my wife live in Porto", "I and my wife live in Porto"),
        ("I kinda like it", "I kinda like it"),
        ("I wanna learn Rust", "I wanna learn Rust"),
        ("I does not matter", "I does not matter"),
        ("I is here", "I is here"),
        ("I focus on backend work", "The user focuses on backend work."),
        # "I"/"My" must be a word of its own, followed by a space.
        ("My-SQL is fine", "My-SQL is fine"),
        ("I/O is slow", "I/O is slow"),
        ("I, for one, like tabs", "I, for one, like tabs"),
        # A phone's apostrophe is an apostrophe.
        ("I\u2019m allergic to nuts", "The user is allergic to nuts."),
        ("I don\u2019t like emoji", "The user doesn't like emoji."),
        # Trailing punctuation: no "tabs,." and no statement made of a question.
        ("I like tabs,", "The user likes tabs."),
        ("I like tabs;", "The user likes tabs."),
        ("I like tabs!!!", "The user likes tabs!!!"),
        ("I like tabs?", "I like tabs?"),
        ("I LOVE TABS", "The user loves TABS."),
        ("I am", "I am"),
        ("My", "My"),
        ("I\u00e9t\u00e9 here", "I\u00e9t\u00e9 here"),
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
        # Common phrasings that were missed.
        "What do you have on me?",
        "What info do you have about me?",
        "Which memories do you have about me?",
        "Do you remember me?",
        "Show me my memories",
        "Who am I?",
        "Was weißt du von mir?",
        "Que sais-tu à mon sujet ?",
        "Qu'est-ce que tu as appris sur moi ?",
        "¿Qué información tienes sobre mí?",
        "O que sabes sobre mim?",
        "Do que te lembras sobre mim?",
        "私のこと覚えてる？",
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
        # Ordinary questions that would have swapped recall out for recent memories.
        "Who am I supposed to ask about the VPN?",
        "who am i talking to?",
        "How does the who am i command work",
        "Tell me what you know about Kubernetes",
        "Show me what you have for the nginx config",
        "What's in your memory cache?",
        "What is in my memory allocation?",
        "Woran erinnerst du dich bei dem Film?",
        "Was merkst du dir bei Passwörtern?",
        "De quoi te souviens-tu du film ?",
        "Qu'est-ce que tu as retenu de la réunion ?",
        "¿Qué sabes de Python?",
        "O que você sabe sobre Python?",
        "私のことは気にしないで",
        # A pasted log that happens to hold the question is about the log.
        "Summarise this chat log:\n" + "Bob: fine. " * 60 + "Ann: what do you know about me?",
    ],
)
def test_not_memory_questions(text: str) -> None:
    assert not is_memory_question(text)


def test_a_rewrite_that_would_pass_the_length_rule_keeps_the_text_as_typed() -> None:
    typed = "I like " + "a" * 192  # 199 characters: the longest memory there is
    assert in_third_person(typed) == typed
    shorter = "I like " + "a" * 180
    assert in_third_person(shorter) == "The user likes " + "a" * 180 + "."
