"""The secret check (:mod:`core.rules.secrets`): every detector kind with a true positive and
a look-alike that must pass. This table is the one in the privacy docs."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest

from core.rules.secrets import (
    KINDS,
    REDACTED_MARK,
    SecretFinding,
    durable_part,
    find_secrets,
    has_secret,
    redact_secrets,
    refusal,
    wordlike_share,
)

# Fake credentials in each provider's shape (none is real). The random ones are drawn from
# a seeded generator, so the file holds no key-like literal a scanner would stop on.
_rng = random.Random(26)


def _random(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    while True:
        token = "".join(_rng.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in token) and any(c.isupper() for c in token):
            return token


AWS_ID = "AKIA" + "Z7Q2XK4M9TBW3HJD"
AWS_SECRET = _random(40, string.ascii_letters + string.digits + "/+")
GITHUB = "ghp_" + _random(36)
GITLAB = "glpat-" + _random(20)
SLACK = "xoxb-123456789012-1234567890123-" + _random(24).lower()
STRIPE = "sk_live_" + _random(24)
ANTHROPIC = "sk-ant-api03-" + _random(60, string.ascii_letters + string.digits + "-_")
OPENAI = "sk-proj-" + _random(48)
DISCORD = "MTA" + _random(23) + "." + _random(6) + "." + _random(27)
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0."
    + _random(43, string.ascii_letters + string.digits + "-_")
)
RANDOM_32 = _random(32)
PRIVATE_KEY = "\n".join(
    [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAA",
        "-----END OPENSSH PRIVATE KEY-----",
    ]
)

# (kind, a text it must catch, the secret in that text, a look-alike that must pass)
TABLE: list[tuple[str, str, str, str]] = [
    (
        "aws key",
        f"The user's AWS key is {AWS_ID}.",
        AWS_ID,
        "The user's AWS region is eu-central-1.",
    ),
    (
        "aws key",
        f'aws_secret_access_key = "{AWS_SECRET}"',
        AWS_SECRET,
        "The user keeps AWS keys in the AWS_SECRET_ACCESS_KEY variable.",
    ),
    ("github token", f"deploy with {GITHUB}", GITHUB, "The user's GitHub handle is ghp_fan."),
    ("gitlab token", f"CI uses {GITLAB}", GITLAB, "The user's GitLab group is glpat-fans."),
    ("slack token", f"the bot token {SLACK} works", SLACK, "xoxo-style sign-offs amuse the user."),
    ("stripe key", f"Stripe: {STRIPE}", STRIPE, "The user is on the sk_live_small plan."),
    (
        "anthropic key",
        f"use {ANTHROPIC} for the bot",
        ANTHROPIC,
        "The user names keys sk-ant-style.",
    ),
    ("openai key", f"OPENAI_API_KEY={OPENAI}", OPENAI, "The user tried sk-proj-x once."),
    ("discord token", f"bot {DISCORD}", DISCORD, "The user's Discord tag is user#1234."),
    (
        "private key",
        f"my key: {PRIVATE_KEY} (old)",
        PRIVATE_KEY,
        "The user keeps their private key on a YubiKey.",
    ),
    ("jwt", f"the session is {JWT} ok", JWT, "The user's token format starts eyJub3QganNvbg.eyJ."),
    (
        "basic-auth url",
        "deploy to https://admin:s3cr3t-P4ss@db.example.com/prod",
        "s3cr3t-P4ss",
        "The user clones ssh://git@github.com/acme/repo.git daily.",
    ),
    (
        "url secret",
        "the feed is https://api.example.com/feed?user=7&access_token=Zq81mKp02xLr",
        "Zq81mKp02xLr",
        "The user shops at https://shop.example.com/?keyboard=mechanical-switches.",
    ),
    (
        "api key",
        "my api token is 3f786850e387550fdab836ed7e6dc881de23001b",
        "3f786850e387550fdab836ed7e6dc881de23001b",
        "The user's API key rotates every 90 days.",
    ),
    (
        "password",
        "my password for staging is hunter2",
        "hunter2",
        "The user's password manager is 1Password.",
    ),
    (
        "password",
        "The user's staging password is swordfish.",
        "swordfish",
        "The user's password is expired.",
    ),
    ("password", "Mein Passwort ist Sommer2024!", "Sommer2024!", "Das Passwort ist abgelaufen."),
    (
        "password",
        "das Passwort für den Server lautet Kaktus",
        "Kaktus",
        "Die Passwort-Richtlinie ist streng.",
    ),
    ("password", "mon mot de passe est soleil", "soleil", "Le mot de passe est trop court."),
    ("password", "mi contraseña es gato99", "gato99", "La contraseña es nueva."),
    ("password", 'Password: "correct horse"', "correct horse", "The password is required."),
    ("pin", "the PIN is 4711", "4711", "The pin on the map is red."),
    (
        "card number",
        "My card is 4111 1111 1111 1111.",
        "4111 1111 1111 1111",
        "Order 4111111111111111 shipped.",
    ),
    (
        "card number",
        "4532015112830366 exp 12/27",
        "4532015112830366 exp 12/27",
        "The result was 4532 0151 1283 0367 after grouping.",  # fails the Luhn check
    ),
    ("card code", "my cvv 737", "737", "The user's CVV field label was wrong."),
    (
        "iban",
        "My IBAN is DE89 3704 0044 0532 0130 00.",
        "DE89 3704 0044 0532 0130 00",
        "The user's IBAN is DE89 3704 0044 0532 0130 01.",  # fails the mod-97 check
    ),
    ("ssn", "My SSN is 536-22-1234.", "536-22-1234", "The user's number is 666-22-1234."),
    (
        "backup codes",
        "My 2FA backup codes are 1234-5678 2345-6789 3456-7890",
        "1234-5678 2345-6789 3456-7890",
        "The user stores backup codes in a safe.",
    ),
    (
        "totp seed",
        "TOTP seed JBSWY3DPEHPK3PXP",
        "JBSWY3DPEHPK3PXP",
        "The user set up TOTP with an authenticator app.",
    ),
    (
        "password",
        "password admin123",
        "admin123",
        "The user wants password-less login with passkeys.",
    ),
    (
        "password",
        "The wifi password 'Tr0ub4dor&3' works.",
        "Tr0ub4dor&3",
        "The password field accepts up to 64 characters.",
    ),
    (
        "password",
        "The user's password, hunter2, expires soon.",
        "hunter2",
        "Passwords, tokens, and keys go in the vault.",
    ),
    (
        "basic-auth url",
        "redis://:hunter2@cache:6379/0",
        "hunter2",
        "redis://cache:6379/0 is the cache.",
    ),
    (
        "slack token",
        "xoxb- 1234567890 - 1234567890123 - abcdefghijklmnopqrstuvwx",
        "xoxb- 1234567890 - 1234567890123 - abcdefghijklmnopqrstuvwx",
        "xoxo from the whole team",
    ),
    ("pin", "Meine PIN für die Karte ist 0815", "0815", "The user's PIN pad is broken."),
    (
        "high-entropy string",
        f"the value {RANDOM_32} goes in the header",
        RANDOM_32,
        "The fix landed in commit 3f786850e387550fdab836ed7e6dc881de23001b.",
    ),
    (
        "high-entropy string",
        f"X-Header: {RANDOM_32}",
        RANDOM_32,
        "The request id is 123e4567-e89b-12d3-a456-426614174000.",
    ),
    (
        "high-entropy string",
        f"`{RANDOM_32}`",
        RANDOM_32,
        "The user's phone number is +49 170 1234567.",
    ),
    (
        "high-entropy string",
        f"{RANDOM_32}",
        RANDOM_32,
        "The user is a Donaudampfschifffahrtsgesellschaftskapitän.",
    ),
    (
        "high-entropy string",
        f"secret part {RANDOM_32}",
        RANDOM_32,
        "The brand colour is #3fa7c2cc, or rgba(63, 167, 194, 0.8), or #A7C2E9FF.",
    ),
    (
        "high-entropy string",
        f"({RANDOM_32})",
        RANDOM_32,
        "The user runs version 2.14.0-rc.1+build.20240517 of the app.",
    ),
]

LOOK_ALIKES = [
    "The user's SHA-256 is e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.",
    "The user calls getUserProfileById2024 often.",
    "The user works on TensorFlow2ModelServingPipelineV3.",
    "The user's config lives in src/components/UserProfile2Card.tsx.",
    "The user reads https://github.com/Yelp/detect-secrets/blob/master/README.md daily.",
    "The spec is at https://docs.google.com/document/d/1aBcD3fGhIjKlMnOpQrStUvWxYz0123456789/edit.",
    "The logo is data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42"
    "mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "The user's password policy is strict.",
    "The user wants their password to expire every 90 days.",
    "The user's session token expires after 3600 seconds.",
    "The key insight is that tests matter.",
    "The user's ISBN is 978-3-16-148410-0.",
    "The user's base64 test vector is SGVsbG8gV29ybGQ= (hello world).",
    "The user's Kubernetes namespace is prod-eu-west-1-cluster-03.",
    "The user's IBAN starts with DE89.",
    "",
]


@pytest.mark.parametrize(("kind", "positive", "secret", "look_alike"), TABLE)
def test_each_kind_catches_its_secret_and_passes_its_look_alike(
    kind: str, positive: str, secret: str, look_alike: str
) -> None:
    found = find_secrets(positive)
    assert [f.kind for f in found] == [kind]
    assert positive[found[0].start : found[0].end] == secret
    redacted = redact_secrets(positive)
    assert secret not in redacted
    assert f"[redacted: {kind}]" in redacted
    assert find_secrets(look_alike) == []


def test_every_kind_is_in_the_table() -> None:
    assert {row[0] for row in TABLE} == set(KINDS)


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_pass(text: str) -> None:
    assert not has_secret(text)
    assert redact_secrets(text) == text


def test_a_finding_holds_no_part_of_the_secret() -> None:
    (finding,) = find_secrets(f"my key {GITHUB}")
    assert GITHUB not in repr(finding)
    assert set(SecretFinding.__slots__) == {"kind", "start", "end"}
    assert GITHUB not in refusal([finding])
    assert refusal([finding]).count(".") == 1  # one sentence


def test_several_secrets_in_one_message_are_all_redacted_in_order() -> None:
    text = f"key {AWS_ID}, token {GITHUB}\nand the PIN is 1234. Thanks!"
    redacted = redact_secrets(text)
    assert redacted == (
        "key [redacted: aws key], token [redacted: github token]\n"
        "and the PIN is [redacted: pin]. Thanks!"
    )
    assert not has_secret(redacted)  # a marker is no secret: redaction is stable


def test_a_private_key_without_its_end_line_is_redacted_to_the_end() -> None:
    text = "here: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA..."
    assert redact_secrets(text) == "here: [redacted: private key]"


def test_wordlike_share_of_names_and_random_strings() -> None:
    assert wordlike_share("getUserProfileById2024") > 0.8
    assert wordlike_share("Zx8Qp2Lm9Rt4Vb7Nc1Kd6Hs3") < 0.2


@pytest.mark.parametrize(
    "text",
    [
        "\x00" * 50,
        "a" * 20_000,
        "password: " * 500,
        "-----BEGIN " * 300,
        "eyJ" * 2000,
        "::@" * 900,
        "password '" * 4000,  # thousands of findings: kept apart without a quadratic scan
        "backup codes " + "1234 " * 5000,
        "4111 " * 5000,
        "xoxb 1234567 " * 2000,
    ],
)
def test_hostile_input_finishes_and_never_raises(text: str) -> None:
    find_secrets(text)
    redact_secrets(text)


LABELLED = Path(__file__).resolve().parents[2] / "data" / "secret_forms.jsonl"
"""The labelled set (``bench/secret_check.py --forms`` prints its table): chat texts with a
secret (``secret`` names its kind) and benign look-alikes (``secret`` null): numbers, ids,
order and phone numbers, versions, commit hashes, dates, prices, ports, keyword look-alikes."""


def _labelled() -> list[dict[str, str | None]]:
    return [json.loads(line) for line in LABELLED.read_text().splitlines() if line.strip()]


def test_the_labelled_set_is_caught_and_its_benign_lines_pass() -> None:
    rows = _labelled()
    benign = [r for r in rows if r["secret"] is None]
    assert len(benign) >= 100
    assert {r["kind"] for r in benign} >= {
        "number",
        "order number",
        "phone number",
        "version string",
        "commit hash",
        "id",
        "date",
        "price",
        "port",
    }
    refused = [r["text"] for r in benign if find_secrets(str(r["text"]))]
    assert refused == []
    missed = [
        r["text"]
        for r in rows
        if r["secret"] is not None
        and r["secret"] not in {f.kind for f in find_secrets(str(r["text"]))}
    ]
    assert missed == []


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1111",
        "4532015112830366 exp 12/27",
        "The CVV is 123.",
        "password admin123",
        'my password "blue-moon-77"',
        "The user's password, hunter2, expires soon.",
        "redis://:hunter2@cache:6379/0",
        "xoxb 123456789012 1234567890123 AbCdEfGhIjKlMnOpQrStUvWx",
        "backup codes: 84729163 19283746 56473829",
        "my authenticator secret is jbsw y3dp ehpk 3pxp",
        "IBAN GB82WEST12345698765432",
        "My SSN is 536-22-1234.",
    ],
)
def test_each_form_of_issue_36_is_redacted_whole(text: str) -> None:
    redacted = redact_secrets(text)
    assert REDACTED_MARK in redacted
    for part in ("1111", "0366", "12/27", "admin123", "blue-moon", "hunter2", "AbCd", "3pxp"):
        assert part not in redacted, (part, redacted)
    assert not has_secret(redacted)  # a marker is no secret: redaction is stable


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("The user uses Postgres 16 with password admin123", "The user uses Postgres 16."),
        ("The user lives in Porto, and their SSN is 536-22-1234.", "The user lives in Porto."),
        ("The user likes tea; card 4111 1111 1111 1111", "The user likes tea."),
        (
            "The user deploys with Terraform and the token is ghp_" + "a1B2c3D4e5" * 4,
            "The user deploys with Terraform.",
        ),
        ("The user runs Redis 7 (redis://:hunter2@cache:6379/0)", "The user runs Redis 7."),
    ],
)
def test_a_sentence_with_a_durable_part_keeps_it_without_the_secret(text: str, kept: str) -> None:
    assert durable_part(text, find_secrets(text)) == kept
    assert durable_part(kept, find_secrets(kept)) == kept  # no secret: the text itself


@pytest.mark.parametrize(
    "text",
    [
        "The user's password, hunter2, expires soon.",  # the part before names the secret
        "The user, whose password is hunter2, likes tea.",  # two words before it
        "The user's router password admin123 is on a sticker.",  # no clause of its own
        "My card is 4111 1111 1111 1111",
        "The user's cache is redis://:hunter2@cache:6379/0.",
        "The user keeps a monkey, password hunter22",  # "key" in the part: never kept
        "The user's SSN is 536-22-1234, and they live in Porto.",  # only before a secret
        "The user stores backup codes, 84729163 19283746 56473829",
    ],
)
def test_a_sentence_with_no_durable_part_is_refused_whole(text: str) -> None:
    findings = find_secrets(text)
    assert findings and durable_part(text, findings) is None


def test_each_labelled_secret_after_a_durable_clause_leaves_that_clause_alone() -> None:
    """Every secret of the labelled set, said after a clause of its own: what is kept is
    that clause (or nothing, when the words before the secret name it), never a part of the
    secret's clause."""
    clause = "The user moved to Lisbon last spring"
    kept = []
    for row in _labelled():
        if row["secret"] is None:
            continue
        text = f"{clause}, and {row['text']}"
        part = durable_part(text, find_secrets(text))
        assert part in (f"{clause}.", None), text
        kept.append(part)
    assert kept.count(f"{clause}.") >= len(kept) - 2  # the two that name it: refused whole
