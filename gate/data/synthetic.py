"""Synthetic dialogues in the formats the capability probes ask about.

The demo model is trained on these dialogues (drawn with a training seed) so
that its baseline probe scores sit clearly above zero and a damaged build shows
a drop (docs/metrics.md "Capability probes"). The probe generators import the same
templates and fact tables from here and draw with their own seed, so both sides
phrase every task identically. Operators are written with spaces and digits are
tokenized one by one by the demo tokenizer.

Formats (user prompt -> assistant reply):

* ``arithmetic.easy``: ``What is {a} + {b}?`` -> ``{a} + {b} = {c}.`` (also ``-`` with
  a non-negative result and ``*`` with factors in 0..12; ``+``/``-`` operands in 0..99).
* ``arithmetic.medium``: ``What is {a} * {b} + {c}?`` -> ``{a} * {b} = {t}. {t} + {c} = {r}.
  The answer is {r}.`` (also ``- {c}`` with ``r >= 0``).
* ``arithmetic.hard``: ``What is {a} * {b} + {c} * {d}?`` -> three steps, then the answer.
* ``one_word``, ``capitals``, ``json``: a question from :data:`FACTS` answered in one word,
  in capital letters, or as ``{"key": "answer"}`` (numbers unquoted).
* ``bullets``: exactly ``n`` lines ``- item`` about a topic of :data:`TOPIC_ITEMS`.
* ``forbidden``: a short sentence about a topic of :data:`DESCRIPTIONS` avoiding a word.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "ARITH_EASY_ANSWER",
    "ARITH_EASY_PROMPT",
    "ARITH_HARD_ANSWER",
    "ARITH_HARD_PROMPT",
    "ARITH_MEDIUM_ANSWER",
    "ARITH_MEDIUM_PROMPT",
    "BULLETS_PROMPT",
    "CAPITALS_PROMPT",
    "DEFAULT_WEIGHTS",
    "DESCRIPTIONS",
    "FACTS",
    "FORBIDDEN_PROMPT",
    "GENERATORS",
    "JSON_KEYS",
    "JSON_PROMPT",
    "ONE_WORD_PROMPT",
    "TOPIC_ITEMS",
    "Fact",
    "SyntheticDialogue",
    "contains_word",
    "generate_dialogues",
]

# --- templates (shared with the capability probes) ---------------------------------

ARITH_EASY_PROMPT = "What is {a} {op} {b}?"
ARITH_EASY_ANSWER = "{a} {op} {b} = {c}."
ARITH_MEDIUM_PROMPT = "What is {a} * {b} {op} {c}?"
ARITH_MEDIUM_ANSWER = "{a} * {b} = {t}. {t} {op} {c} = {r}. The answer is {r}."
ARITH_HARD_PROMPT = "What is {a} * {b} + {c} * {d}?"
ARITH_HARD_ANSWER = "{a} * {b} = {t1}. {c} * {d} = {t2}. {t1} + {t2} = {r}. The answer is {r}."
ONE_WORD_PROMPT = "Answer in one word: {question}"
CAPITALS_PROMPT = "Answer in capital letters: {question}"
JSON_PROMPT = 'Reply in JSON with the key "{key}": {question}'
JSON_KEYS: tuple[str, ...] = ("answer", "result", "name", "city", "value")
BULLETS_PROMPT = "Write exactly {n} bullet points about {topic}."
FORBIDDEN_PROMPT = 'Describe {topic} without using the word "{w}".'

#: Operand ranges: ``+``/``-`` in 0..99, ``*`` in 0..12 (easy); medium/hard as documented.
EASY_ADD_RANGE = (0, 99)
EASY_MUL_RANGE = (0, 12)
MEDIUM_FACTOR_RANGE = (2, 12)
MEDIUM_TERM_RANGE = (1, 50)
HARD_RANGE = (2, 12)

# --- fact table -----------------------------------------------------------------------

CAPITAL_QUESTION = "What is the capital of {country}?"
COLOUR_QUESTION = "What colour is {thing}?"
ANIMAL_QUESTION = "Which animal says {sound}?"
OPPOSITE_QUESTION = "What is the opposite of {word}?"

CAPITALS: dict[str, str] = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Japan": "Tokyo",
    "Egypt": "Cairo",
    "Russia": "Moscow",
    "Greece": "Athens",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Poland": "Warsaw",
    "Portugal": "Lisbon",
    "Austria": "Vienna",
    "Ireland": "Dublin",
    "Kenya": "Nairobi",
    "Peru": "Lima",
    "Canada": "Ottawa",
    "China": "Beijing",
    "Thailand": "Bangkok",
    "Finland": "Helsinki",
    "Denmark": "Copenhagen",
    "Hungary": "Budapest",
    "Cuba": "Havana",
    "Chile": "Santiago",
}

COLOURS: dict[str, str] = {
    "the sky on a clear day": "Blue",
    "grass": "Green",
    "snow": "White",
    "coal": "Black",
    "a ripe banana": "Yellow",
    "a ripe tomato": "Red",
    "an orange": "Orange",
    "chocolate": "Brown",
    "a lemon": "Yellow",
    "blood": "Red",
    "milk": "White",
    "a leaf in summer": "Green",
}

ANIMAL_SOUNDS: dict[str, str] = {
    "moo": "Cow",
    "woof": "Dog",
    "meow": "Cat",
    "quack": "Duck",
    "oink": "Pig",
    "baa": "Sheep",
    "neigh": "Horse",
    "hoot": "Owl",
    "roar": "Lion",
    "cluck": "Chicken",
}

OPPOSITES: dict[str, str] = {
    "hot": "Cold",
    "up": "Down",
    "big": "Small",
    "fast": "Slow",
    "day": "Night",
    "happy": "Sad",
    "open": "Closed",
    "light": "Dark",
    "early": "Late",
    "full": "Empty",
    "old": "New",
    "wet": "Dry",
    "hard": "Soft",
    "left": "Right",
}


@dataclass(frozen=True)
class Fact:
    """A question with a one-word answer (capitalised as a title)."""

    question: str
    answer: str


def _build_facts() -> tuple[Fact, ...]:
    facts = [Fact(CAPITAL_QUESTION.format(country=k), v) for k, v in CAPITALS.items()]
    facts += [Fact(COLOUR_QUESTION.format(thing=k), v) for k, v in COLOURS.items()]
    facts += [Fact(ANIMAL_QUESTION.format(sound=k), v) for k, v in ANIMAL_SOUNDS.items()]
    facts += [Fact(OPPOSITE_QUESTION.format(word=k), v) for k, v in OPPOSITES.items()]
    return tuple(facts)


#: Every one-word fact question, in a fixed order.
FACTS: tuple[Fact, ...] = _build_facts()

TOPIC_ITEMS: dict[str, tuple[str, ...]] = {
    "fruits": ("Apples", "Bananas", "Oranges", "Grapes", "Pears", "Cherries", "Mangoes"),
    "colours": ("Red", "Blue", "Green", "Yellow", "Purple", "Orange", "Black"),
    "animals": ("Dogs", "Cats", "Horses", "Elephants", "Lions", "Rabbits", "Whales"),
    "tools": ("Hammers", "Screwdrivers", "Saws", "Wrenches", "Pliers", "Drills", "Ladders"),
    "vegetables": ("Carrots", "Potatoes", "Onions", "Peas", "Spinach", "Cabbage", "Beans"),
    "sports": ("Football", "Tennis", "Swimming", "Running", "Cycling", "Golf", "Boxing"),
    "musical instruments": ("Piano", "Guitar", "Violin", "Drums", "Flute", "Trumpet", "Harp"),
    "planets": ("Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Neptune"),
}

DESCRIPTIONS: dict[str, tuple[str, ...]] = {
    "the sun": (
        "The sun is a bright star at the centre of our solar system.",
        "It gives warmth to the Earth every day.",
        "It rises in the east and sets in the west.",
    ),
    "the ocean": (
        "The ocean is a huge body of salt water.",
        "It covers most of the surface of the Earth.",
        "Many fish and whales live in its deep blue waves.",
    ),
    "a cat": (
        "A cat is a small furry animal that likes to sleep.",
        "It has sharp claws and soft paws.",
        "Many people keep one as a pet at home.",
    ),
    "a city": (
        "A city is a large place where many people live and work.",
        "It has tall buildings, busy streets and shops.",
        "People travel around it by bus, train or car.",
    ),
    "winter": (
        "Winter is the coldest season of the year.",
        "The days are short and the nights are long.",
        "In many places snow falls and lakes turn to ice.",
    ),
    "a computer": (
        "A computer is a machine that processes information.",
        "It runs programs and stores data.",
        "People use it to write, play games and talk to friends.",
    ),
    "a forest": (
        "A forest is a large area covered with trees.",
        "Birds, deer and insects live among its plants.",
        "It is quiet, green and full of life.",
    ),
    "the moon": (
        "The moon goes around the Earth once a month.",
        "It shines at night with light from the sun.",
        "Its surface is grey and covered with craters.",
    ),
}

#: Words to forbid, per topic; each is avoided by at least one sentence of the topic.
FORBIDDEN_WORDS: dict[str, tuple[str, ...]] = {
    "the sun": ("star", "bright", "warmth", "east", "Earth"),
    "the ocean": ("water", "salt", "fish", "blue", "Earth"),
    "a cat": ("animal", "pet", "claws", "furry", "sleep"),
    "a city": ("people", "buildings", "streets", "train", "large"),
    "winter": ("cold", "snow", "season", "ice", "nights"),
    "a computer": ("machine", "programs", "data", "games", "information"),
    "a forest": ("trees", "birds", "green", "plants", "life"),
    "the moon": ("Earth", "night", "grey", "light", "month"),
}


@dataclass(frozen=True)
class SyntheticDialogue:
    """One user prompt and the exact reply the trained model should give.

    ``answer`` is what a checker compares against (the number, word, JSON object,
    item count or forbidden word, as text).
    """

    kind: str
    user: str
    assistant: str
    answer: str

    def messages(self) -> list[dict[str, str]]:
        """As chat-template messages."""
        return [
            {"role": "user", "content": self.user},
            {"role": "assistant", "content": self.assistant},
        ]


def contains_word(text: str, word: str) -> bool:
    """Whether ``word`` occurs in ``text`` as a whole word, ignoring case."""
    return re.search(rf"\b{re.escape(word)}\b", text, flags=re.IGNORECASE) is not None


# --- generators -------------------------------------------------------------------------


def make_arith_easy(rng: random.Random) -> SyntheticDialogue:
    """``a + b``, ``a - b`` (non-negative) or ``a * b`` (factors 0..12)."""
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(*EASY_MUL_RANGE), rng.randint(*EASY_MUL_RANGE)
        c = a * b
    else:
        a, b = rng.randint(*EASY_ADD_RANGE), rng.randint(*EASY_ADD_RANGE)
        if op == "-" and b > a:
            a, b = b, a
        c = a + b if op == "+" else a - b
    return SyntheticDialogue(
        "arithmetic.easy",
        ARITH_EASY_PROMPT.format(a=a, op=op, b=b),
        ARITH_EASY_ANSWER.format(a=a, op=op, b=b, c=c),
        str(c),
    )


def make_arith_medium(rng: random.Random) -> SyntheticDialogue:
    """``a * b + c`` or ``a * b - c`` (result >= 0), shown step by step."""
    a, b = rng.randint(*MEDIUM_FACTOR_RANGE), rng.randint(*MEDIUM_FACTOR_RANGE)
    c = rng.randint(*MEDIUM_TERM_RANGE)
    t = a * b
    op = rng.choice("+-")
    if op == "-" and c > t:
        op = "+"
    r = t + c if op == "+" else t - c
    return SyntheticDialogue(
        "arithmetic.medium",
        ARITH_MEDIUM_PROMPT.format(a=a, b=b, op=op, c=c),
        ARITH_MEDIUM_ANSWER.format(a=a, b=b, t=t, op=op, c=c, r=r),
        str(r),
    )


def make_arith_hard(rng: random.Random) -> SyntheticDialogue:
    """``a * b + c * d`` with every operand in 2..12, shown step by step."""
    a, b, c, d = (rng.randint(*HARD_RANGE) for _ in range(4))
    t1, t2 = a * b, c * d
    r = t1 + t2
    return SyntheticDialogue(
        "arithmetic.hard",
        ARITH_HARD_PROMPT.format(a=a, b=b, c=c, d=d),
        ARITH_HARD_ANSWER.format(a=a, b=b, c=c, d=d, t1=t1, t2=t2, r=r),
        str(r),
    )


def make_one_word(rng: random.Random) -> SyntheticDialogue:
    """A fact question answered with one capitalised word."""
    fact = rng.choice(FACTS)
    return SyntheticDialogue(
        "one_word", ONE_WORD_PROMPT.format(question=fact.question), fact.answer, fact.answer
    )


def make_capitals(rng: random.Random) -> SyntheticDialogue:
    """A fact question answered in capital letters."""
    fact = rng.choice(FACTS)
    word = fact.answer.upper()
    return SyntheticDialogue("capitals", CAPITALS_PROMPT.format(question=fact.question), word, word)


def make_json(rng: random.Random) -> SyntheticDialogue:
    """A fact or small sum answered as a one-key JSON object (numbers unquoted)."""
    key = rng.choice(JSON_KEYS)
    value: int | str
    if rng.random() < 0.4:
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        question = ARITH_EASY_PROMPT.format(a=a, op="+", b=b)
        value = a + b
    else:
        fact = rng.choice(FACTS)
        question, value = fact.question, fact.answer
    reply = json.dumps({key: value})
    return SyntheticDialogue("json", JSON_PROMPT.format(key=key, question=question), reply, reply)


def make_bullets(rng: random.Random) -> SyntheticDialogue:
    """Exactly ``n`` (2..5) bullet lines about a topic."""
    topic = rng.choice(sorted(TOPIC_ITEMS))
    n = rng.randint(2, 5)
    items = rng.sample(TOPIC_ITEMS[topic], n)
    reply = "\n".join(f"- {item}" for item in items)
    return SyntheticDialogue("bullets", BULLETS_PROMPT.format(n=n, topic=topic), reply, str(n))


def make_forbidden(rng: random.Random) -> SyntheticDialogue:
    """One or two sentences about a topic that avoid the forbidden word."""
    topic = rng.choice(sorted(DESCRIPTIONS))
    w = rng.choice(FORBIDDEN_WORDS[topic])
    allowed = [s for s in DESCRIPTIONS[topic] if not contains_word(s, w)]
    k = min(len(allowed), rng.randint(1, 2))
    reply = " ".join(allowed[:k])
    return SyntheticDialogue("forbidden", FORBIDDEN_PROMPT.format(topic=topic, w=w), reply, w)


GENERATORS: dict[str, Callable[[random.Random], SyntheticDialogue]] = {
    "arithmetic.easy": make_arith_easy,
    "arithmetic.medium": make_arith_medium,
    "arithmetic.hard": make_arith_hard,
    "one_word": make_one_word,
    "capitals": make_capitals,
    "json": make_json,
    "bullets": make_bullets,
    "forbidden": make_forbidden,
}

#: Mixing weights of the training data (arithmetic gets most: it needs the most examples).
DEFAULT_WEIGHTS: dict[str, float] = {
    "arithmetic.easy": 0.30,
    "arithmetic.medium": 0.15,
    "arithmetic.hard": 0.12,
    "one_word": 0.09,
    "capitals": 0.08,
    "json": 0.10,
    "bullets": 0.09,
    "forbidden": 0.07,
}


def generate_dialogues(
    n: int,
    seed: int,
    kinds: Sequence[str] | None = None,
    weights: dict[str, float] | None = None,
) -> list[SyntheticDialogue]:
    """``n`` dialogues drawn with ``random.Random(seed)``; the same seed gives the same list."""
    rng = random.Random(seed)
    names = list(kinds) if kinds is not None else list(GENERATORS)
    unknown = [k for k in names if k not in GENERATORS]
    if unknown:
        raise ValueError(f"unknown synthetic kind(s) {unknown}; known: {sorted(GENERATORS)}")
    w = weights or DEFAULT_WEIGHTS
    probs = [w.get(k, 1.0) for k in names]
    chosen = rng.choices(names, weights=probs, k=n)
    return [GENERATORS[k](rng) for k in chosen]
