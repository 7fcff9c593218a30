"""The secret check: whether a text carries a credential, and where. Secrets never become
memories (every write path refuses them, :mod:`core.memory.service`), and stored chat
messages are redacted once answered.

Built on detect-secrets (Yelp, PyPI ``detect-secrets``): its plugins' regular expressions and
its Shannon entropy are used in-process, nothing runs as a subprocess or touches a file. On
top of them, rules it does not have: an Anthropic key (``sk-ant-...``), newer OpenAI, GitHub,
Slack and Stripe forms, and the natural-language forms a chat carries ("my password for
staging is ...", "the PIN is 4711", "das Passwort lautet ...", "mot de passe : ...") in
English, German, French, Spanish, Italian, Portuguese, Dutch, Swedish and Polish.

Detectors, most specific first (a later finding overlapping an earlier one is dropped):

==================  ====================================================================
kind                what
==================  ====================================================================
aws key             ``AKIA...`` access key ids; a 40-character secret quoted near "aws"
github token        ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` and ``github_pat_``
gitlab token        ``glpat-`` and the other GitLab prefixes
slack token         ``xoxb-``/``xoxp-``/``xapp-`` tokens, incoming-webhook URLs, a token
                    written with spaces in it
stripe key          ``sk_live_``/``rk_live_`` (also ``_test_``), ``whsec_``
anthropic key       ``sk-ant-...``
openai key          ``sk-...T3BlbkFJ...``, ``sk-proj-``/``sk-svcacct-``/``sk-admin-``
discord token       bot tokens (three dot-separated base64 parts)
other api key       SendGrid, PyPI, npm, Twilio, Telegram, Mailchimp, Square, Azure
                    storage, Google (``AIza...``)
private key         a ``BEGIN ... PRIVATE KEY`` block (to its ``END`` line or the end)
jwt                 a JSON Web Token whose header and payload decode as JSON
basic-auth url      the password in ``scheme://user:password@host`` (or ``://:password@``)
api key             a token of 16+ characters named "API key", "token", "secret" ... or
                    "Bearer": also a hex or one-case one
url secret          the value of ``token=``, ``key=``, ``secret=``, ``password=``,
                    ``signature=`` ... in a URL's query
password            "password/passphrase/Passwort/mot de passe/contraseña/senha/... is|:|= X"
pin                 "PIN/PIN-Code/code PIN/PUK/CVV is|:|= 1234" (3 to 12 digits)
card number         13-19 digits with a card network's prefix and a valid Luhn digit
                    (not when named an order, invoice, phone ... number), with its expiry
card code           "CVV 737", "CVC: 0412", "security code 991"
iban                an IBAN passing its mod-97 check and its country's length
ssn                 a US SSN (``536-22-1234``; undashed only after "SSN")
backup codes        the codes after "backup codes", "recovery codes", "2FA codes" ...
totp seed           16+ base32 characters of one case after "TOTP", "2FA", "authenticator"
password (bare)     "password admin123", "the wifi password 'x'", "the password, x, ..."
high-entropy        a run of 20+ base64 characters with upper, lower case and digits, as
string              random as a key (entropy, and how often the character class changes)
==================  ====================================================================

What passes on purpose (look-alikes, ``tests/core/rules/test_secrets.py``): hex strings (a git
commit hash, a UUID, a SHA-256: too many are harmless), phone numbers, long words
(Donaudampfschifffahrtsgesellschaftskapitän), version strings, CSS colours, ordinary URLs
and ``data:`` URIs, and a "password" followed by an ordinary word ("the password is
expired", "my password manager is 1Password").

What cannot be caught: a secret with no shape and no keyword ("remember hunter2"), a
one-case or hex random key, a passphrase of ordinary words, a secret spelled out or split
over messages. The check narrows what is stored; it is no guarantee.

Findings carry a kind and a span only: the secret itself is never kept, returned or logged.
Cost per call, and caught / missed / false positives on the labelled set
``tests/data/secret_forms.jsonl`` against the check before issue 36 (the detectors with
``since=0``): ``bench/secret_check.py --forms``.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

KINDS: dict[str, str] = {
    "aws key": "an AWS key",
    "github token": "a GitHub token",
    "gitlab token": "a GitLab token",
    "slack token": "a Slack token",
    "stripe key": "a Stripe key",
    "anthropic key": "an Anthropic API key",
    "openai key": "an OpenAI API key",
    "discord token": "a Discord token",
    "api key": "an API key",
    "private key": "a private key",
    "jwt": "a JSON Web Token",
    "basic-auth url": "a password in a URL",
    "url secret": "a key in a URL",
    "password": "a password",
    "pin": "a PIN",
    "card number": "a payment card number",
    "card code": "a card security code",
    "iban": "a bank account number (IBAN)",
    "ssn": "a US Social Security number",
    "backup codes": "two-factor backup codes",
    "totp seed": "a two-factor (TOTP) seed",
    "high-entropy string": "something that looks like a key or token",
}
"""Every finding's ``kind`` and how a refusal names it ("That looks like {name}...")."""


REDACTED_MARK = "[redacted: "
"""How every redaction marker begins (:attr:`SecretFinding.marker`)."""


@dataclass(frozen=True, slots=True)
class SecretFinding:
    """A secret found in a text: its ``kind`` (a key of :data:`KINDS`) and where it is,
    ``text[start:end]``. Holds no part of the secret."""

    kind: str
    start: int
    end: int

    @property
    def marker(self) -> str:
        """What replaces the secret in stored text: ``[redacted: aws key]``."""
        return f"{REDACTED_MARK}{self.kind}]"

    @property
    def name(self) -> str:
        """The kind in a sentence: "an AWS key"."""
        return KINDS[self.kind]


Span = tuple[int, int]
Finder = Callable[[str], Iterator[Span]]


@dataclass(frozen=True, slots=True)
class _Detector:
    """One rule: its ``kind`` and its finder, run only when ``text`` holds one of ``needles``
    (or its lower-case form one of ``lower_needles``): substrings every match contains, so
    the common text with no secret costs a few substring searches, not a regex scan."""

    kind: str
    find: Finder
    needles: tuple[str, ...] = ()
    lower_needles: tuple[str, ...] = ()
    since: int = 0
    """The issue that added the rule (0: before issue 36); ``bench/secret_check.py`` runs the
    check without the newer ones as its baseline."""

    def applies(self, text: str, lower: Callable[[], str]) -> bool:
        if not self.needles and not self.lower_needles:
            return True
        if any(n in text for n in self.needles):
            return True
        return bool(self.lower_needles) and any(n in lower() for n in self.lower_needles)


_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")


def _regex_finder(patterns: Iterable[re.Pattern[str]], *, secret_group: bool = False) -> Finder:
    """Spans of every match of ``patterns``, widened over the token characters that follow
    (a provider's pattern may match a fixed length of a longer token). With
    ``secret_group``, a pattern with groups gives the span of its first matched one (where
    detect-secrets captures the secret part: the password of a basic-auth URL)."""
    compiled = tuple(patterns)

    def find(text: str) -> Iterator[Span]:
        for pattern in compiled:
            for match in pattern.finditer(text):
                if secret_group and pattern.groups:
                    group = next(g for g in range(1, pattern.groups + 1) if match.group(g))
                    yield match.span(group)
                    continue
                tail = _TOKEN_TAIL.match(text, match.end())
                yield match.start(), tail.end() if tail is not None else match.end()

    return find


# ---------------------------------------------------------------- rules of our own

_ANTHROPIC = re.compile(r"sk-ant-[A-Za-z0-9_-]{20,}")
_OPENAI = re.compile(r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}")
_GITHUB_PAT = re.compile(r"github_pat_[A-Za-z0-9_]{22,}")
_SLACK_APP = re.compile(r"xapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+")
_STRIPE = re.compile(r"(?:(?:sk|rk)_test_[0-9a-zA-Z]{24,}|whsec_[0-9a-zA-Z]{24,})")
_GOOGLE = re.compile(r"AIza[0-9A-Za-z_-]{35}")

_URL_REST = re.compile(r"://\S+")
_DATA_URI = re.compile(r"data:[\w/+.-]*;base64,\S*")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")


def _urls(text: str) -> list[Span]:
    """Spans of the URLs (``scheme://...`` to the next space) and ``data:`` URIs in ``text``."""
    spans = []
    if "://" in text:
        for match in _URL_REST.finditer(text):
            start = match.start()
            while start > 0 and text[start - 1] in _SCHEME_CHARS:
                start -= 1
            spans.append((start, match.end()))
    if "data:" in text:
        spans += [m.span() for m in _DATA_URI.finditer(text)]
    return spans


_URL_SECRET = re.compile(
    r"[?&](?:[\w.-]*[_-])?(?:token|key|secret|password|passwd|pwd|signature|sig|auth|apikey"
    r"|api_key|access_token|client_secret)=([^&#\s]{8,})",
    re.IGNORECASE,
)

_BEGIN_KEY = re.compile(r"-----BEGIN[A-Z0-9 ]*-----")
_END_KEY = re.compile(r"-----END[A-Z0-9 ]*-----")

# Natural-language forms. A keyword, an optional "for <up to three words>", a copula or : or
# =, then the value: quoted, or one token. An unquoted value counts when it has a digit or a
# symbol, or ends its clause ("... is swordfish."), and is not an ordinary word of the list.
_PASSWORD_WORDS = (
    r"pass(?:word|phrase|code)s?|passwd|pwd|pw|pass-?wort|kennwort|mot de passe|mdp"
    r"|contrase(?:ñ|n)a|senha|wachtwoord|l(?:ö|o)senord|has(?:ł|l)o|пароль|parola d'ordine"
)
_PASSWORD_NEEDLES = (
    "pass",
    "pw",
    "kennwort",
    "mdp",
    "contrase",
    "senha",
    "wachtwoord",
    "lösenord",
    "losenord",
    "hasło",
    "haslo",
    "пароль",
    "parola",
)
"""A substring of each keyword of ``_PASSWORD_WORDS``, in lower case ("passwd", "pwd" and
"mot de passe" hold "pass" or "pw")."""
_PIN_WORDS = r"pin(?:[- ]?(?:code|nummer|number|nr\.?))?|code pin|puk|cvv|cvc"
_QUALIFIER = (
    r"(?:\s+(?:for|to|of|on|at|in|für|zum|zur|vom|von|bei|pour|de|du|des|para|del|per|voor"
    r"|van|för|till|dla|do)(?:\s+[^\s:=]+){1,3}?)?"
)
_COPULA = (
    r"(?:\s*[:=]|\s+(?:(?:is|was|has been|ist|wurde)\s+)?(?:set|changed|reset|geändert)"
    r"\s+(?:to|auf|zu)\b"
    r"|\s+(?:is|was|ist|war|lautet|est|était|es|era|è|é|e|är|jest|zijn)\b"
    r"(?:\s+(?:now|still|jetzt|noch|maintenant|toujours|ahora|agora|ora|nu|teraz|nog)\b)?)"
)
_VALUE = r"\s*(?:[\"'“”‘’«»`]([^\"'“”‘’«»`\n]{1,100})[\"'“”‘’«»`]|([^\s\"'“”‘’«»`]+))"
_PASSWORD = re.compile(
    rf"\b(?:{_PASSWORD_WORDS})(?:'s)?{_QUALIFIER}{_COPULA}{_VALUE}", re.IGNORECASE
)
# "api key", "apikey", "API_TOKEN", "client secret", "Bearer": the keyword is where a match
# starts (a word start, or right after api/access/auth/secret/client/app/bearer), so the
# scan only stops at k, t, s and b.
_KEYED = re.compile(
    r"(?:(?<![^\W_])|(?<=api)|(?<=access)|(?<=auth)|(?<=secret)|(?<=client)|(?<=app))"
    rf"(?:key|token|secret|bearer)(?:[ _-]?id)?s?{_QUALIFIER}(?:{_COPULA}|\s)\s*"
    r"[\"'“‘«`]?([A-Za-z0-9+/=_.-]{16,})",
    re.IGNORECASE,
)
_PIN = re.compile(rf"\b(?:{_PIN_WORDS}){_QUALIFIER}{_COPULA}\s*[\"'“‘«]?(\d{{3,12}})\b", re.I)
_CLAUSE_END = re.compile(r"\s*(?:$|[.,;!?)\]]|\b(?:and|und|et|y|e|en|och|i|but|aber|mais)\b)")
_TRAILING = ".,;:?)]"
_ORDINARY = frozenset(
    """a an the my your his her our their this that it its not no too very so also
    required needed wrong right correct incorrect expired old new same different secret
    private safe secure unsafe insecure weak strong long short simple easy hard complex
    empty blank missing unknown changed reset set saved stored written encrypted hashed
    protected optional mandatory mine yours there here in on at of for with by from
    what which why how who when where like something nothing anything
    der die das ein eine mein meine dein deine sein seine unser nicht kein keine zu sehr
    falsch richtig abgelaufen neu alt gleich geheim sicher unsicher schwach stark lang kurz
    gespeichert geändert le la les un une mon ma mes ton ta son sa pas trop faux expiré
    nouveau el los las mi tu su il lo gli uno una mio mia o os um uma meu minha het een
    mijn niet te en ett min din inte jest nie nueva nuevo vieja viejo segura seguro débil
    fuerte larga corta incorrecta correcta caducada nouvelle faible fort forte court courte
    incorrect nuova nuovo vecchia sbagliata scaduta nova novo velha errada fraca""".split()
)


def _natural(pattern: re.Pattern[str], *, digits_only: bool) -> Finder:
    def find(text: str) -> Iterator[Span]:
        for match in pattern.finditer(text):
            if digits_only:
                yield match.span(1)
                continue
            quoted = match.group(1) is not None
            start, end = match.span(1 if quoted else 2)
            if not quoted:
                while end > start and text[end - 1] in _TRAILING:
                    end -= 1
            value = text[start:end]
            if not value or value.lower() in _ORDINARY:
                continue
            if quoted or not value.isalpha() or _CLAUSE_END.match(text, match.end(2)) is not None:
                yield start, end

    return find


def _keyed_finder(text: str) -> Iterator[Span]:
    """A token of 16+ characters with letters and digits named as a key, token or secret
    ("the API key is ...", "token: ...", "Bearer ..."): caught even when it is hex or of one
    case, which the entropy rule lets through."""
    for match in _KEYED.finditer(text):
        value = match.group(1).rstrip(".")
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            yield match.start(1), match.start(1) + len(value)


# High-entropy strings: base64 runs (detect-secrets' Base64HighEntropyString charset), not
# inside a URL, not hex, with upper and lower case and digits, random by two measures.
_B64_RUN = re.compile(r"[A-Za-z0-9+/=_-]{20,}")
_QUOTED_B64 = re.compile(r"([\"'`])([A-Za-z0-9+/=_-]{20,})\1")
QUOTED_ENTROPY_BITS = 4.5
"""detect-secrets' own rule for code, kept: a quoted base64 string of 20+ characters with
this Shannon entropy or more is a secret whatever its shape."""
_HEX = re.compile(r"[0-9a-fA-F-]+")
MIN_RANDOM_CHARS = 20
"""A high-entropy candidate is at least this long (shorter random strings are too often
identifiers; a real key of the providers above is caught by its prefix)."""
ENTROPY_SLACK_BITS = 0.9
"""A candidate of ``n`` distinct-rich characters is random when its Shannon entropy reaches
``min(4.5, log2(n) - ENTROPY_SLACK_BITS)`` bits per character: a random base64 string of
``n`` characters has about ``log2(n) - 0.3`` when ``n`` is small against 64, and 4.5 is
detect-secrets' default limit for base64 strings. Tuned on the look-alike table."""
MAX_WORDLIKE = 0.7
"""... and under this share of its characters stand in word-like pieces of three or more
(``get``, ``User``, ``Profile``, ``2024`` in ``getUserProfileById2024``: 0.82; camelCase names
and product names measure 0.78 to 0.97, random base64 0.38 on average). With both rules a
random 20-character base64 string is caught 90.5 % of the time, a 40-character one 98.9 %
(3,000 each, ``bench/secrets.py --randomness``); the rest are let through."""
_PIECE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+|[^A-Za-z\d]+")


def wordlike_share(token: str) -> float:
    """The share of ``token``'s characters in pieces of three or more: runs of lower case
    (after one capital), of capitals, of digits, of symbols."""
    return sum(len(p) for p in _PIECE.findall(token) if len(p) >= 3) / max(len(token), 1)


def looks_random(token: str, entropy: Callable[[str], float]) -> bool:
    """Whether a base64 run ``token`` is random enough to be a key: at least
    :data:`MIN_RANDOM_CHARS` long, not hex, upper and lower case and digits, word-like under
    :data:`MAX_WORDLIKE`, ``entropy`` (detect-secrets' Shannon entropy over the base64
    alphabet, bits per character) at least ``min(4.5, log2(n) - ENTROPY_SLACK_BITS)``."""
    token = token.strip("=").strip("-_/+")
    n = len(token)
    if n < MIN_RANDOM_CHARS or _HEX.fullmatch(token):
        return False
    if not (
        any(c.isdigit() for c in token)
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
    ):
        return False
    if wordlike_share(token) >= MAX_WORDLIKE:
        return False
    return entropy(token) >= min(4.5, math.log2(n) - ENTROPY_SLACK_BITS)


# ---------------------------------------------------------------- numbers with a checksum,
# and the forms a chat writes (issue 36). Checksums by python-stdnum (PyPI ``python-stdnum``).

_DIGITS = tuple("0123456789")
_SQUASH = str.maketrans(
    {chr(c): ("0" if chr(c).isdigit() else "" if chr(c) in " -" else "x") for c in range(128)}
)


@lru_cache(maxsize=4)
def _squashed(text: str) -> str:
    """``text`` with each ASCII digit as ``0``, spaces and dashes taken out and every other
    ASCII character as ``x`` (one C pass): ``"0" * n in _squashed(text)`` tells whether
    ``n`` digits stand together, spaces and dashes between them allowed. The number rules
    below run their regular expressions (slow to scan a long text with) only then."""
    return text.translate(_SQUASH)


def _digit_run(n: int) -> Callable[[Finder], Finder]:
    """A finder run only when ``text`` has ``n`` digits together (:func:`_squashed`)."""
    run = "0" * n

    def wrap(find: Finder) -> Finder:
        def gated(text: str) -> Iterator[Span]:
            if run in _squashed(text):
                yield from find(text)

        return gated

    return wrap


_CARD = re.compile(r"[2-6](?<![\d.,/-][2-6])\d{3}(?:[ -]?\d){8,15}(?![\d/-]|[.,]\d)")
_CARD_WORDS = re.compile(
    r"\b(?:order|invoice|tracking|ticket|case|account|reference|ref|receipt|phone|tel|fax"
    r"|call|isbn|ean|imei|serial|id|no\.?|number|#)(?:\s+(?:is|was))?\s*[:#=]?\s*$",
    re.IGNORECASE,
)
_IBAN_HEAD = re.compile(r"\b[A-Z]{2}\d{2} ?$")
_CARD_PREFIXES = re.compile(
    r"4|5[0-8]|2(?:2[2-9]|[3-6]\d|7[01]|720)|3[47]|3(?:0[0-5]|[689])|35(?:2[89]|[3-8]\d)"
    r"|6(?:011|4[4-9]|5|2|304|7)"
)
"""Issuer prefixes of payment cards (ISO/IEC 7812 IINs as the networks publish them): Visa 4,
Mastercard 51-55 and 2221-2720, Maestro 50 and 56-58, Amex 34 and 37, Diners 300-305, 36,
38, 39, JCB 3528-3589, Discover 6011, 644-649, 65, UnionPay 62, Maestro 6304 and 67."""
_CARD_MENTION = re.compile(r"\b(?:card|visa|mastercard|amex|credit|debit|cc)\b", re.IGNORECASE)
_CARD_TAIL = re.compile(
    r"(?:[\s,;]+(?:exp(?:iry|ires|iration)?\.?|valid(?: thru| until)?|cvv2?|cvc2?|csc)"
    r"\s*[:=]?\s*(?:\d{1,2}\s*/\s*\d{2,4}|\d{3,4}))+",
    re.IGNORECASE,
)


@_digit_run(13)
def _card_finder(text: str) -> Iterator[Span]:
    """A payment card number: 13 to 19 digits (spaces or dashes between them) starting 2 to 6
    (Mastercard, Amex/Diners, Visa, Mastercard, Discover/UnionPay), passing the Luhn check;
    not when named an order, invoice, tracking, phone ... number unless a card is named too.
    The span takes in a following expiry date or CVV ("exp 12/27", "cvv 123")."""
    from stdnum import luhn

    for match in _CARD.finditer(text):
        digits = re.sub(r"[ -]", "", match.group())
        if not 13 <= len(digits) <= 19 or not _CARD_PREFIXES.match(digits):
            continue
        if digits.startswith(("34", "37")) and len(digits) != 15:  # Amex: 15 digits
            continue
        if _IBAN_HEAD.search(text, max(0, match.start() - 6), match.start()):
            continue  # the account part of an IBAN
        if not luhn.is_valid(digits):
            continue
        before = text[max(0, match.start() - 40) : match.start()]
        if _CARD_WORDS.search(before) and not _CARD_MENTION.search(before):
            continue
        tail = _CARD_TAIL.match(text, match.end())
        yield match.start(), tail.end() if tail is not None else match.end()


_CARD_CODE = re.compile(
    r"\b(?:cvv2?|cvc2?|csc|security code|card code|kartenprüfnummer|prüfnummer|cryptogramme)"
    r"(?:\s+(?:is|was|ist|est|es|=|:)|\s*[:=#]|\s)?\s*[\"'“‘«]?(\d{3,4})\b",
    re.IGNORECASE,
)

_IBAN = re.compile(r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d{2}(?: ?[A-Z0-9]){11,30}\b")


@_digit_run(8)
def _iban_finder(text: str) -> Iterator[Span]:
    """An IBAN: a country code, two check digits, the account (spaces allowed), valid by
    ISO 13616's mod-97 check and the country's length (``stdnum.iban``)."""
    from stdnum import iban

    for match in _IBAN.finditer(text):
        value = match.group().rstrip()
        compact = value.replace(" ", "")
        # the match may run into a following word; try the longest valid prefix of groups
        for end in range(len(compact), 14, -1):
            if iban.is_valid(compact[:end]):
                yield match.start(), match.start() + _spaced_length(value, end)
                break


def _spaced_length(spaced: str, n: int) -> int:
    """Characters of ``spaced`` that hold its first ``n`` non-space ones."""
    seen = 0
    for i, char in enumerate(spaced):
        if char != " ":
            seen += 1
            if seen == n:
                return i + 1
    return len(spaced)


_SSN = re.compile(r"\d(?<![\d-]\d)\d\d-\d\d-\d{4}(?![\d-])")
_SSN_NAMED = re.compile(
    r"\b(?:ssn|social security(?: number| no\.?)?|sozialversicherungsnummer)\b\D{0,20}?"
    r"(?<!\d)(\d{3}[ .]?\d{2}[ .]?\d{4})(?!\d)",
    re.IGNORECASE,
)


@_digit_run(9)
def _ssn_finder(text: str) -> Iterator[Span]:
    """A US Social Security number ``123-45-6789`` with a valid area, group and serial
    (``stdnum.us.ssn``: not 000, 666 or 900-999, no 00 group, no 0000 serial)."""
    from stdnum.us import ssn

    for match in _SSN.finditer(text):
        if ssn.is_valid(match.group()):
            yield match.span()


def _ssn_named_finder(text: str) -> Iterator[Span]:
    """``123456789`` or ``123 45 6789`` when named an SSN (valid as above)."""
    from stdnum.us import ssn

    for match in _SSN_NAMED.finditer(text):
        if ssn.is_valid(re.sub(r"[ .]", "", match.group(1))):
            yield match.span(1)


_BACKUP_NEEDLES = (
    "backup",
    "recovery",
    "rescue",
    "emergency",
    "scratch",
    "2fa",
    "mfa",
    "two-factor",
    "one-time",
    "otp",
)
_BACKUP_CODES = re.compile(
    r"\b(?:backup|recovery|rescue|emergency|scratch|2fa|mfa|two-factor|one-time|otp)"
    r"[ -](?:codes?|keys?)\b[^\n\d]{0,30}?"
    r"((?:[A-Za-z0-9]{4,10}(?:-[A-Za-z0-9]{4,10})?[,;]?(?:\s+|$)){1,})",
    re.IGNORECASE,
)


def _backup_codes_finder(text: str) -> Iterator[Span]:
    """Two-factor backup or recovery codes: after "backup codes", "recovery codes", "2FA
    codes" ..., a run of codes (4 to 10 letters or digits, a dash allowed in the middle),
    each with a digit."""
    for match in _BACKUP_CODES.finditer(text):
        start = match.start(1)
        end = start
        for code in re.finditer(r"[A-Za-z0-9-]+", match.group(1)):
            if not any(c.isdigit() for c in code.group()):
                break
            end = start + code.end()
        if end > start:
            yield start, end


_TOTP = re.compile(
    r"\b(?:totp|otp|2fa|mfa|two-factor|authenticator|google authenticator)"
    r"(?:[ -](?:seed|secret|key|setup key|code))?\b[^\n]{0,20}?"
    r"(?<![A-Za-z0-9])((?:[A-Za-z2-7]{4} ?){3,}[A-Za-z2-7]{0,4}=*)(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def _totp_finder(text: str) -> Iterator[Span]:
    """A TOTP seed: 16 or more base32 characters (spaces every four allowed, as apps show
    them) after "TOTP", "2FA", "authenticator" ... (with "seed", "secret", "key"): one case
    throughout, with a digit 2-7, so words are not taken."""
    for match in _TOTP.finditer(text):
        value = match.group(1).rstrip()
        compact = value.replace(" ", "").rstrip("=")
        if len(compact) < 16 or not (compact.isupper() or compact.islower()):
            continue
        if not any(c in "234567" for c in compact):
            continue
        yield match.start(1), match.start(1) + len(value)


# URL credentials: ``redis://:hunter2@cache:6379/0``, ``postgres://app:pw@db/x``: the
# password of any scheme's userinfo (detect-secrets' rule wants a user name before it).
_URL_PASSWORD = re.compile(r"://[^\s:/@]*:([^\s/@]+)@[^\s/@]")

# "password admin123", "the wifi password 'Tr0ub4dor&3'", "the password, hunter2, expires":
# a keyword then the value with no copula: quoted, set off by commas or brackets, or a token
# with a digit or symbol.
_PASSWORD_BARE = re.compile(
    rf"\b(?:{_PASSWORD_WORDS})(?:'s)?{_QUALIFIER}"
    r"(?:\s*[\"'“”‘’«»`]([^\"'“”‘’«»`\n]{1,100})[\"'“”‘’«»`]"
    r"|\s*[,(]\s*([^\s,()]{3,100})\s*[,)]"
    r"|\s+([^\s\"'“”‘’«»`]{4,100}))",
    re.IGNORECASE,
)


def _password_bare_finder(text: str) -> Iterator[Span]:
    for match in _PASSWORD_BARE.finditer(text):
        if match.group(1) is not None:
            if match.group(1).strip() and not match.group(1).startswith(REDACTED_MARK):
                yield match.span(1)
            continue
        group = 2 if match.group(2) is not None else 3
        start, end = match.span(group)
        while end > start and text[end - 1] in _TRAILING:
            end -= 1
        value = text[start:end]
        if len(value) < 4 or value.lower() in _ORDINARY or value.startswith("[redacted"):
            continue
        letters = any(c.isalpha() for c in value)
        mixed = letters and not value.isalpha() and not value.startswith(("http", "www."))
        if mixed or (value.isdigit() and len(value) >= 6):
            yield start, end


_SLACK_SPLIT = re.compile(
    r"\bx ?o ?x ?[abposr](?:[ \t]*-?[ \t]*\d{6,}){2,3}[ \t]*-?[ \t]*"
    r"([A-Za-z0-9]{4,}(?: [A-Za-z0-9]{4,}){0,7})",
    re.IGNORECASE,
)


def _slack_split_finder(text: str) -> Iterator[Span]:
    """A Slack token written with spaces in it ("xoxb- 1234567890 - 1234567890123 - abcd
    efgh ...", "xoxb 1234567890 1234567890123 AbCd..."): its parts with spaces or dashes
    between them, the last one of 16+ letters and digits."""
    for match in _SLACK_SPLIT.finditer(text):
        if sum(c.isalnum() for c in match.group(1)) >= 16:
            yield match.span()


# ---------------------------------------------------------------- assembly


_DISCORD_GATE = re.compile(r"\.[a-zA-Z\d_-]{6}\.")
_TELEGRAM_GATE = re.compile(r":[0-9A-Za-z_-]{35}")


def _gated(gate: re.Pattern[str], find: Finder) -> Finder:
    """``find``, run only when ``gate`` (a part of every match that starts with a literal,
    so the scan is fast) is found: a pattern that starts with a character class is slow to
    scan a long text with."""

    def gated(text: str) -> Iterator[Span]:
        if gate.search(text) is not None:
            yield from find(text)

    return gated


def _private_key_finder(markers: Sequence[re.Pattern[str]]) -> Finder:
    """A private key block: from its ``-----BEGIN`` line to its ``-----END ...-----`` line,
    or to the end of the text when it has none (detect-secrets finds the marker)."""
    find_marker = _regex_finder(markers)

    def find(text: str) -> Iterator[Span]:
        for start, _ in find_marker(text):
            begin = _BEGIN_KEY.search(text, max(0, start - 16), start + 80)
            start = begin.start() if begin is not None and begin.start() <= start else start
            end = _END_KEY.search(text, start)
            yield start, end.end() if end is not None else len(text)

    return find


def _jwt_finder(patterns: Sequence[re.Pattern[str]], valid: Callable[[str], bool]) -> Finder:
    """detect-secrets' JWT pattern (its signature part is matched lazily, so the span is
    widened over it) and its check that the header and payload decode as JSON."""
    find_match = _regex_finder(patterns)
    tail = re.compile(r"[A-Za-z0-9_.+/=-]*")

    def find(text: str) -> Iterator[Span]:
        for start, end in find_match(text):
            more = tail.match(text, end)
            end = more.end() if more is not None else end
            if valid(text[start:end]):
                yield start, end

    return find


def _entropy_finder(entropy: Callable[[str], float]) -> Finder:
    def find(text: str) -> Iterator[Span]:
        urls = _urls(text)
        for match in _B64_RUN.finditer(text):
            start, end = match.span()
            if any(a <= start < b for a, b in urls):
                continue
            if looks_random(match.group(), entropy):
                yield start, end
        if "'" in text or '"' in text or "`" in text:
            for match in _QUOTED_B64.finditer(text):
                if entropy(match.group(2)) >= QUOTED_ENTROPY_BITS:
                    yield match.span(2)

    return find


def _url_secret_finder(text: str) -> Iterator[Span]:
    for start, end in _urls(text):
        for match in _URL_SECRET.finditer(text, start, end):
            yield match.span(1)


def _import_detect_secrets() -> None:
    """Import detect-secrets and undo what its import does to the process: it turns on
    ``logging.captureWarnings`` and gives its ``detect-secrets`` logger a stderr handler of
    its own (``detect_secrets.core.log``), which would bypass our logging setup."""
    captured = getattr(warnings.showwarning, "__module__", None) == "logging"
    import detect_secrets  # noqa: F401

    if not captured:
        logging.captureWarnings(False)
    logging.getLogger("detect-secrets").handlers.clear()


@cache
def _detectors() -> tuple[_Detector, ...]:
    """Built on first use: importing detect-secrets costs about 0.2 s (it brings requests),
    which a command that writes no memory should not pay."""
    _import_detect_secrets()
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.discord import DiscordBotTokenDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.mailchimp import MailchimpDetector
    from detect_secrets.plugins.npm import NpmDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.square_oauth import SquareOAuthDetector
    from detect_secrets.plugins.stripe import StripeDetector
    from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
    from detect_secrets.plugins.twilio import TwilioKeyDetector

    entropy = Base64HighEntropyString().calculate_shannon_entropy
    regex = _regex_finder
    gitlab = ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "GR1348941", "glcbt-", "glimt-")
    return (
        _Detector(
            "private key",
            _private_key_finder(list(PrivateKeyDetector.denylist)),
            needles=("PRIVATE KEY", "PuTTY-User-Key"),
        ),
        _Detector("anthropic key", regex([_ANTHROPIC]), needles=("sk-ant-",)),
        _Detector(
            "openai key",
            regex([*OpenAIDetector.denylist, _OPENAI]),
            needles=("T3BlbkFJ", "sk-proj-", "sk-svcacct-", "sk-admin-"),
        ),
        _Detector(
            "aws key",
            regex(AWSKeyDetector.denylist, secret_group=True),
            needles=("A3T", "ABIA", "ACCA", "AKIA", "ASIA"),
            lower_needles=("aws",),
        ),
        _Detector(
            "github token",
            regex([*GitHubTokenDetector.denylist, _GITHUB_PAT]),
            needles=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        ),
        _Detector(
            "gitlab token",
            regex(GitLabTokenDetector.denylist),
            needles=(*gitlab, "glptt-", "glagent-", "gloas-"),
        ),
        _Detector(
            "slack token",
            regex([*SlackDetector.denylist, _SLACK_APP]),
            needles=("xapp-",),
            lower_needles=("xox", "hooks.slack.com"),
        ),
        _Detector(
            "stripe key",
            regex([*StripeDetector.denylist, _STRIPE]),
            needles=("k_live_", "k_test_", "whsec_"),
        ),
        _Detector(
            "discord token",
            _gated(_DISCORD_GATE, regex(DiscordBotTokenDetector.denylist)),
            needles=(".",),
        ),
        _Detector(
            "api key",
            regex(
                [
                    *SendGridDetector.denylist,
                    *PypiTokenDetector.denylist,
                    *NpmDetector.denylist,
                    *SquareOAuthDetector.denylist,
                    *AzureStorageKeyDetector.denylist,
                    _GOOGLE,
                ]
            ),
            needles=("SG.", "pypi-", "_authToken", "sq0csp-", "AccountKey=", "AIza"),
        ),
        _Detector("api key", regex(TwilioKeyDetector.denylist), needles=("AC", "SK")),
        _Detector(
            "api key",
            _gated(_TELEGRAM_GATE, regex(TelegramBotTokenDetector.denylist)),
            needles=(":",),
        ),
        _Detector("api key", regex(MailchimpDetector.denylist), needles=("-us",)),
        _Detector(
            "jwt",
            _jwt_finder(JwtTokenDetector.denylist, JwtTokenDetector.is_formally_valid),
            needles=("eyJ",),
        ),
        _Detector(
            "basic-auth url",
            regex(BasicAuthDetector.denylist, secret_group=True),
            needles=("://",),
        ),
        _Detector(
            "basic-auth url",
            regex([_URL_PASSWORD], secret_group=True),
            needles=("://",),
            since=36,
        ),
        _Detector("url secret", _url_secret_finder, needles=("://",)),
        _Detector("slack token", _slack_split_finder, lower_needles=("xox", "x o x"), since=36),
        _Detector("card number", _card_finder, needles=_DIGITS, since=36),
        _Detector("iban", _iban_finder, needles=_DIGITS, since=36),
        _Detector("ssn", _ssn_finder, needles=("-",), since=36),
        _Detector("ssn", _ssn_named_finder, lower_needles=("ssn", "social", "sozial"), since=36),
        _Detector(
            "backup codes",
            _backup_codes_finder,
            lower_needles=_BACKUP_NEEDLES,
            since=36,
        ),
        _Detector(
            "totp seed",
            _totp_finder,
            lower_needles=("otp", "2fa", "mfa", "factor", "authenticator"),
            since=36,
        ),
        _Detector(
            "card code",
            regex([_CARD_CODE], secret_group=True),
            lower_needles=(
                "cvv",
                "cvc",
                "csc",
                "security code",
                "card code",
                "prüfnummer",
                "cryptogr",
            ),
            since=36,
        ),
        _Detector("api key", _keyed_finder, lower_needles=("key", "token", "secret", "bearer")),
        _Detector(
            "pin", _natural(_PIN, digits_only=True), lower_needles=("pin", "puk", "cvv", "cvc")
        ),
        _Detector(
            "password", _natural(_PASSWORD, digits_only=False), lower_needles=_PASSWORD_NEEDLES
        ),
        _Detector("password", _password_bare_finder, lower_needles=_PASSWORD_NEEDLES, since=36),
        _Detector("high-entropy string", _entropy_finder(entropy)),
    )


def find_secrets(text: str) -> list[SecretFinding]:
    """The secrets in ``text``, in text order, none overlapping (where two detectors find
    the same place the more specific one, earlier in the module's table, wins).

    Pure and fast (microseconds for a memory, ``bench/secret_check.py``); never raises for
    any ``str``. A finding holds a kind and a span, never the secret.
    """
    return _find(text, _detectors())


def _find(text: str, detectors: Sequence[_Detector]) -> list[SecretFinding]:
    """:func:`find_secrets` with these ``detectors`` (the bench's baseline runs a subset)."""
    taken: list[SecretFinding] = []
    lowered: list[str] = []

    def lower() -> str:
        if not lowered:
            lowered.append(text.lower())
        return lowered[0]

    for detector in detectors:
        if not detector.applies(text, lower):
            continue
        for start, end in detector.find(text):
            # ``taken`` stays sorted and without overlaps: only its neighbours can overlap
            # (a scan of all of it would be quadratic in a text of thousands of findings)
            at = bisect.bisect_left(taken, start, key=lambda f: f.start)
            if at > 0 and taken[at - 1].end > start:
                continue
            if at < len(taken) and taken[at].start < end:
                continue
            taken.insert(at, SecretFinding(detector.kind, start, end))
    return taken


def has_secret(text: str) -> bool:
    """Whether :func:`find_secrets` finds anything in ``text``."""
    return bool(find_secrets(text))


def redact_secrets(text: str, findings: Sequence[SecretFinding] | None = None) -> str:
    """``text`` with every secret replaced by its marker (``[redacted: aws key]``);
    ``findings`` from :func:`find_secrets` of this same text, found again when None."""
    found = find_secrets(text) if findings is None else sorted(findings, key=lambda f: f.start)
    if not found:
        return text
    parts: list[str] = []
    last = 0
    for finding in found:
        parts += [text[last : finding.start], finding.marker]
        last = finding.end
    parts.append(text[last:])
    return "".join(parts)


_CLAUSE_BREAK = re.compile(
    r"\s*(?:[,;(]|\s[-–—]\s)\s*|\s+(?:and|but|with|using|via|plus|while|where)\s+",
    re.IGNORECASE,
)
"""Where a clause may begin: a comma, semicolon, bracket or dash, or a joining word."""
_SECRET_WORDS = re.compile(
    r"pass|pwd|\bpw\b|\bpins?\b|key|token|secret|card|cvv|cvc|iban|ssn|social security"
    r"|\b2fa\b|totp|\botp\b|code|credential|login|account n|routing|seed",
    re.IGNORECASE,
)
"""Words that say a secret is near (substrings, so "keyboard" counts too: a part that names
one is never kept, whatever it says)."""
_WORD = re.compile(r"[^\W\d_]+")
MIN_DURABLE_WORDS = 3
"""The fewest words a kept part has (fewer: "The user" is no fact of its own)."""


def durable_part(text: str, findings: Sequence[SecretFinding]) -> str | None:
    """The part of the one-sentence ``text`` that stands without its secrets: the words
    before the clause that carries the first of ``findings`` (from :func:`find_secrets` of
    this text), as a sentence; None when there is no such part, and the text is refused
    whole. ``text`` itself when ``findings`` is empty.

    "The user uses Postgres 16 with password admin123" -> "The user uses Postgres 16.".
    Only what comes before the clause's start (a comma, semicolon, bracket or dash, or
    "and", "but", "with", "using", "via", "plus", "while", "where") is kept, and only when it
    has at least :data:`MIN_DURABLE_WORDS` words, names nothing secret-like
    (``_SECRET_WORDS``: "The user's password" is refused) and holds no secret itself; nothing
    after a secret is ever kept.
    """
    if not findings:
        return text
    head = text[: min(f.start for f in findings)]
    starts = [m.start() for m in _CLAUSE_BREAK.finditer(head)]
    if not starts:
        return None
    kept = head[: starts[-1]].rstrip(" ,;:-–—(")
    if (
        len(_WORD.findall(kept)) < MIN_DURABLE_WORDS
        or _SECRET_WORDS.search(kept)
        or REDACTED_MARK in kept
        or find_secrets(kept)
    ):
        return None
    return kept if kept.endswith((".", "!", "?")) else f"{kept}."


def refusal(findings: Sequence[SecretFinding]) -> str:
    """The one sentence a refused memory gets: what it looked like and why (no secret
    echoed)."""
    return (
        f"That looks like {findings[0].name}, and secrets are never stored as memories, "
        "so nothing was remembered."
    )
