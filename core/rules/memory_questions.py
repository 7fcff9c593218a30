"""Questions about the memory itself: "what do you remember about me?" in six languages.

Such a message shares no words with the memories it asks about, so recall alone finds
nothing; the turn loop answers it with the standing profile and the user's most recent
memories instead (:meth:`core.chat.loop.TurnLoop.memory_context`). :func:`is_memory_question`
is a rule of patterns per language (English, German, French, Spanish, Portuguese, Japanese),
matched on the lower-cased message with accents kept; it must stay cheap (every turn runs it).
"""

from __future__ import annotations

import re

_PATTERNS = [
    # English: what do you remember/know about me, what have you learned/saved about me,
    # summarise my memories, show me my notes, tell me what you know about me.
    r"\bwhat (?:do|did|else do) you (?:remember|recall|know|have (?:saved|stored|noted|on))"
    r"(?: \w+)? (?:about|of|on|regarding) me\b",
    r"\bwhat (?:have|has) you (?:learned|learnt|remembered|saved|stored|noted|picked up|"
    r"gathered)(?: so far)? (?:about|of|on|from) me\b",
    r"\bwhat(?:'s| is) in (?:your|my) memory\b",
    r"\b(?:tell|show) me what you (?:remember|know|have|recall)\b",
    r"\b(?:do|what) you (?:remember|know) (?:anything )?about me\b",
    r"\bsummari[sz]e (?:my|your) (?:memories|memory|notes|profile)\b",
    r"\b(?:list|show|give me) (?:my|your) (?:memories|notes about me)\b",
    r"\bwhat do you know (?:about )?(?:me|myself)\b",
    r"\bwho am i\b",
    # German
    r"\bwas (?:weißt|weisst|wisst) (?:du|ihr) (?:alles |eigentlich |noch )?(?:über|ueber|von)"
    r" mich\b",
    r"\bwas hast du (?:dir )?(?:über|ueber|von) mich (?:gemerkt|gelernt|gespeichert|notiert)\b",
    r"\bworan erinnerst du dich\b",
    r"\bwas (?:merkst|erinnerst) du dir\b",
    r"\bfass(?:e)? (?:meine|deine) (?:erinnerungen|notizen) zusammen\b",
    # French
    r"\b(?:que|qu'est-ce que|qu’est-ce que) (?:sais-tu|tu sais|savez-vous|vous savez|"
    r"te rappelles-tu|retiens-tu) (?:de|sur|à propos de) moi\b",
    r"\bque sais[- ]tu (?:de|sur) moi\b",
    r"\bde quoi te souviens-tu\b",
    r"\bqu'as-tu appris sur moi\b|\bqu’as-tu appris sur moi\b",
    r"\brésume (?:mes|tes) (?:souvenirs|notes|mémoires)\b",
    r"\bqu'est-ce que tu as retenu\b|\bqu’est-ce que tu as retenu\b",
    # Spanish
    r"\bqu[ée] (?:sabes|recuerdas|has aprendido|sab[ée]is|conoces) (?:de|sobre|acerca de) m[íi]\b",
    r"\bqu[ée] recuerdas de m[íi]\b",
    r"\bresume (?:mis|tus) (?:recuerdos|notas|memorias)\b",
    # Portuguese
    r"\bo que (?:você|voce|vc|tu) (?:sabe|sabes|lembra|lembras|se lembra|aprendeu|guardou)"
    r" (?:de|sobre|a respeito de) mim\b",
    r"\bdo que (?:você|voce|tu) se lembra (?:de|sobre) mim\b",
    r"\bresuma (?:minhas|suas) (?:memórias|memorias|notas|lembranças)\b",
    # Japanese (no word boundaries in Japanese text)
    r"(?:私|わたし|僕|ぼく|俺|おれ)(?:について|のこと(?:を|で|について)?)(?:何か|なにか|何|なに|どんなこと)"
    r"(?:を|が)?(?:覚えて|知って|記憶して|分かって|わかって)",
    r"(?:私|わたし|僕|ぼく|俺|おれ)について(?:覚えて|知って)いること",
    r"(?:私|わたし|僕|ぼく|俺|おれ)の(?:記憶|メモ)を(?:まとめて|要約して|見せて)",
]
_QUESTION = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))
_SPACE = re.compile(r"\s+")


def is_memory_question(text: str) -> bool:
    """True when ``text`` asks what the bot remembers or knows about the person.

    Examples: "What do you remember about me?", "what have you learned about me so far",
    "Was weißt du über mich?", "Que sais-tu de moi ?", "¿Qué sabes de mí?",
    "O que você sabe sobre mim?", "私について何を覚えていますか？". A question about someone
    else ("what do you know about Rust?") is not one.
    """
    if len(text) > 2000:  # a long message is about something else; keep the scan cheap
        text = text[:2000]
    normalized = _SPACE.sub(" ", text.lower().replace("’", "'"))
    return _QUESTION.search(normalized) is not None
