"""Questions about the memory itself: "what do you remember about me?" in six languages.

Such a message shares no words with the memories it asks about, so recall alone finds
nothing; the turn loop answers it with the standing profile and the user's most recent
memories instead (:meth:`core.chat.loop.TurnLoop.memory_context`). :func:`is_memory_question`
is a rule of patterns per language (English, German, French, Spanish, Portuguese, Japanese),
matched on the lower-cased message with accents kept; it must stay cheap (every turn runs it).
"""

from __future__ import annotations

import re

_END = r"\s*[?.!]*$"  # the rest of the message: nothing but closing punctuation
_PATTERNS = [
    # English: what do you remember/know/have on me, what have you learned/saved about me,
    # what info do you have about me, summarise my memories, show me my memories, tell me
    # what you know about me, do you remember me?, who am I?
    r"\bwhat (?:else )?(?:do|did) (?:you|u) (?:remember|recall|know|have(?: saved| stored|"
    r" noted| written down)?)(?: \w+)? (?:about|of|on|regarding) me\b",
    r"\bwhat (?:have|has) you (?:learned|learnt|remembered|saved|stored|noted|picked up|"
    r"gathered)(?: so far)? (?:about|of|on|from) me\b",
    r"\b(?:what|which) (?:info|information|data|details|facts|notes|memories)(?: \w+)? (?:do|did)"
    r" you (?:have|keep|store|hold|know)(?: \w+)? (?:about|of|on) me\b",
    r"\bwhat(?:'s| is) in your memory(?: about me)?" + _END,
    r"\b(?:tell|show) me what you (?:remember|know|have|recall)(?: \w+)? (?:about|of|on) me\b",
    r"\b(?:do|what) you (?:remember|know) (?:anything )?about me\b",
    r"\bdo you (?:still )?(?:remember|know) me" + _END,
    r"\bsummari[sz]e (?:my|your) (?:memories|memory|notes|profile)\b",
    r"\b(?:list|show|show me|give me|what are) (?:all )?(?:my|your) (?:memories|notes about me)\b",
    r"\bwhat do you know (?:about )?(?:me|myself)\b",
    r"^\W*who am i" + _END,
    r"\bdo you know who i am\b",
    # German
    r"\bwas (?:weißt|weisst|wisst) (?:du|ihr) (?:alles |eigentlich |noch |so )?(?:über|ueber|von)"
    r" (?:mich|mir)\b",
    r"\bwas hast du (?:dir )?(?:über|ueber|von) mich (?:gemerkt|gelernt|gespeichert|notiert)\b",
    r"\bworan erinnerst du dich(?: (?:bei|an|über|ueber) (?:mir|mich))?" + _END,
    r"\bwas (?:merkst|erinnerst) du dir(?: (?:über|ueber|von) mich)?" + _END,
    r"\bfass(?:e)? (?:meine|deine) (?:erinnerungen|notizen) zusammen\b",
    # French (after "’" became "'")
    r"\b(?:que|qu'est-ce que) (?:sais-tu|tu sais|savez-vous|vous savez|"
    r"te rappelles-tu|retiens-tu) (?:de moi|sur moi|à propos de moi|à mon sujet)\b",
    r"\bque sais[- ]tu (?:de moi|sur moi|à mon sujet)\b",
    r"\bde quoi te souviens-tu(?: (?:de moi|sur moi|à mon sujet))?" + _END,
    r"\b(?:qu'as-tu|qu'est-ce que tu as) (?:appris|retenu|noté|enregistré|mémorisé)" + _END,
    r"\b(?:qu'as-tu|qu'est-ce que tu as) (?:appris|retenu|noté|enregistré|mémorisé)"
    r" (?:de moi|sur moi|à mon sujet)\b",
    r"\btu (?:sais|te souviens de) quoi (?:de moi|sur moi|à mon sujet)\b",
    r"\brésume (?:mes|tes) (?:souvenirs|notes|mémoires)\b",
    # Spanish
    r"\bqu[ée] (?:sabes|recuerdas|has aprendido|sab[ée]is|conoces) (?:de|sobre|acerca de) m[íi]\b",
    r"\bqu[ée] (?:informaci[óo]n|datos|cosas|notas) (?:tienes|guardas|sabes|recuerdas)"
    r" (?:de|sobre|acerca de) m[íi]\b",
    r"\bresume (?:mis|tus) (?:recuerdos|notas|memorias)\b",
    # Portuguese (the pronoun is often left out: "o que sabes sobre mim?")
    r"\bo que (?:(?:você|voce|vc|tu) )?(?:sabe|sabes|lembra|lembras|se lembra|aprendeu|"
    r"aprendeste|guardou|guardaste) (?:de|sobre|a respeito de) mim\b",
    r"\bdo que (?:(?:você|voce|tu) )?(?:se lembra|te lembras) (?:de|sobre) mim\b",
    r"\bresuma (?:minhas|suas) (?:memórias|memorias|notas|lembranças)\b",
    # Japanese (no word boundaries in Japanese text)
    r"(?:私|わたし|僕|ぼく|俺|おれ)(?:について|のこと(?:を|で|について)?)(?:何か|なにか|何|なに|どんなこと)"
    r"(?:を|が)?(?:覚えて|知って|記憶して|分かって|わかって)",
    r"(?:私|わたし|僕|ぼく|俺|おれ)について(?:覚えて|知って)いること",
    r"(?:私|わたし|僕|ぼく|俺|おれ)のこと(?:を)?(?:覚えて|知って)(?:る|います|いる)"
    r"(?:か|の)?\s*[?？。]*$",
    r"(?:私|わたし|僕|ぼく|俺|おれ)の(?:記憶|メモ)を(?:まとめて|要約して|見せて)",
]
_QUESTION = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))
_SPACE = re.compile(r"\s+")
MAX_QUESTION_CHARS = 500
"""A longer message is about something else (a pasted log or document that happens to hold
"what do you know about me?"): it keeps recall, and the scan stays cheap."""


def is_memory_question(text: str) -> bool:
    """True when ``text`` asks what the bot remembers or knows about the person.

    Examples: "What do you remember about me?", "what have you learned about me so far",
    "Was weißt du über mich?", "Que sais-tu de moi ?", "¿Qué sabes de mí?",
    "O que você sabe sobre mim?", "私について何を覚えていますか？". A question about someone
    else ("what do you know about Rust?"), "who am I supposed to ask?", "tell me what you
    know about Kubernetes" and a message over :data:`MAX_QUESTION_CHARS` are not.
    """
    if len(text) > MAX_QUESTION_CHARS:
        return False
    normalized = _SPACE.sub(" ", text.lower().replace("’", "'"))
    return _QUESTION.search(normalized) is not None
