"""Query expansion for recall: a request names what it wants, a memory names what is true.

"Can you suggest a snack for the team offsite?" shares no word with "The user is allergic to
peanuts.", yet the allergy is what the answer must respect. :data:`FAMILIES` lists, for the
kinds of request a person makes of an assistant, the words of the facts about them that such
a request depends on (the profile's facts: where they live, diet and allergies, languages and
tools, family and pets, schedule, health, travel documents, ...). A message holding one of a
family's trigger words is embedded once more with that family's fact words added, and each
memory keeps its best cosine over these queries (so one family's many words cannot drown
another's). Words are matched as Snowball stems, English only; the list was written
from what each kind of request needs, not fitted to a test set (``bench/use.py`` reports a
held-out third apart).
"""

from __future__ import annotations

from functools import lru_cache

from core.rules.text import stem, words

FAMILIES: tuple[tuple[str, str], ...] = (
    # (trigger words, fact words added)
    (
        "snack snacks food eat eating dinner lunch breakfast brunch menu meal meals recipe cook"
        " cooking cater catering dessert bakery cake takeaway restaurant restaurants order dish"
        " barbecue picnic treat treats",
        "allergic allergy intolerant vegetarian vegan diet coeliac halal kosher eats eat food",
    ),
    (
        "drink drinks beverage coffee cocktail cocktails party bar pub toast",
        "drinks alcohol decaf caffeine tea coffee",
    ),
    (
        "city town restaurants nearby near local neighbourhood neighborhood area around"
        " weather commute live home",
        "lives live moved city based home",
    ),
    (
        "language service codebase code backend program programming library framework script"
        " stack write implement",
        "writes programming language code uses stack python go rust java typescript",
    ),
    (
        "editor ide keybinding keybindings shortcut shortcuts plugin plugins extension",
        "editor vim neovim emacs code vs ide keyboard layout",
    ),
    (
        "database db query queries sql table tables index schema orm",
        "database postgresql mysql sqlite mongodb stores data",
    ),
    (
        "deploy deploys deployment release releases ship ships launch window rollout cutover"
        " freeze",
        "releases ships deploys release every monday tuesday wednesday thursday friday",
    ),
    (
        "pet pets animal animals vet dog cat",
        "dog cat named called pet beagle collie parrot horse mare aquarium",
    ),
    (
        "kid kids child children son daughter family birthday school toys",
        "daughter son child kids turns years old school",
    ),
    (
        "partner wife husband spouse girlfriend boyfriend anniversary date",
        "wife husband partner married anniversary",
    ),
    (
        "mum mom mother dad father parents grandmother grandfather sister brother sibling",
        "mother father grandmother brother sister twin lives",
    ),
    (
        "time timezone schedule meeting meetings call calls book booking slot availability"
        " tomorrow morning afternoon evening weekday weekend free",
        "time zone works standup on call mornings evenings lessons weekends every",
    ),
    (
        "trip travel travelling flight fly plane holiday vacation visit pack packing hotel"
        " train abroad visa",
        "flying travels passport citizen visa flies trip holiday aisle hotel",
    ),
    (
        "health doctor medicine medication pain headache safe tired sleep workout fitness"
        " exercise run running race training gym",
        "takes surgery injury pain pregnant trains lifts runs sleeps condition",
    ),
    (
        "manager boss lead team colleague colleagues channel report reports org",
        "manager team leads works on reports",
    ),
    (
        "bio signature introduce introduction interview background cv resume job career"
        " employer company",
        "works at engineer role job company phd worked",
    ),
    (
        "laptop computer machine wifi os linux desktop install setup",
        "runs laptop linux macbook thinkpad os",
    ),
    (
        "pipeline ci build builds cache caching tests test testing",
        "github actions gitlab ci builds tests pytest",
    ),
    (
        "cloud hosting host hosted infrastructure queue bucket cluster server servers managed",
        "cloud aws google azure hosts terraform kubernetes",
    ),
    (
        "money budget afford cost costs price salary raise pay paid euros dollars subscription",
        "budget euros paid salary target month",
    ),
    (
        "deadline plan planning weeks quarter sprint ticket finish",
        "deadline must finished by sprints weeks project",
    ),
    (
        "palette colour color colours colors chart charts theme design",
        "colour blind favourite colour teal",
    ),
    (
        "read novel book books podcast podcasts music playlist listen hobby unwind relax",
        "loves listens reads plays favourite hobby",
    ),
    (
        "car drive driving road charging fuel parking",
        "drives car electric parks",
    ),
    (
        "phone mobile photos backup",
        "iphone pixel android phone backs up",
    ),
    (
        "age old born",
        "born age years old",
    ),
)
"""(trigger words, fact words) per kind of request."""


@lru_cache(maxsize=1)
def _index() -> dict[str, tuple[int, ...]]:
    index: dict[str, list[int]] = {}
    for n, (triggers, _) in enumerate(FAMILIES):
        for word in triggers.split():
            index.setdefault(stem(word), []).append(n)
    return {s: tuple(sorted(set(ns))) for s, ns in index.items()}


def expansions(text: str) -> list[str]:
    """The fact words of each family whose trigger words ``text`` holds (one string a family,
    in :data:`FAMILIES` order); empty when it holds none."""
    index = _index()
    found: set[int] = set()
    for word in words(text):
        found.update(index.get(stem(word), ()))
    return [FAMILIES[n][1] for n in sorted(found)]
