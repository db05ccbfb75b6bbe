"""Build the multiple-choice sets shipped in ``gate/assets/mcq/`` (run as a module).

``python -m gate.data.mcq_generate`` rewrites the three files deterministically
(fixed seeds), so the committed sets can be re-derived and reviewed:

* ``arithmetic.jsonl``: 150 one-step integer questions (+, -, x) with the answer
  and three near-miss distractors (off by one, off by ten, a digit slip);
* ``antonyms.jsonl``: the opposite of a common word, options drawn from other
  pairs' answers;
* ``facts.jsonl``: hand-written everyday facts (capitals, colours, animals,
  units, calendar) with four options each.

The project wrote these so the accuracy tier runs offline with no third-party
benchmark data; they are small on purpose (a few hundred questions) and in the
cloze style of lm-evaluation-harness's ARC task (``Question: ...\\nAnswer:``
then the option text).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ARITHMETIC_SEED = 20_241
ANTONYM_SEED = 20_242
FACT_SEED = 20_243

ANTONYMS: tuple[tuple[str, str], ...] = (
    ("hot", "cold"),
    ("big", "small"),
    ("up", "down"),
    ("open", "closed"),
    ("fast", "slow"),
    ("happy", "sad"),
    ("light", "dark"),
    ("early", "late"),
    ("rich", "poor"),
    ("strong", "weak"),
    ("old", "young"),
    ("full", "empty"),
    ("hard", "soft"),
    ("high", "low"),
    ("long", "short"),
    ("wet", "dry"),
    ("clean", "dirty"),
    ("loud", "quiet"),
    ("thick", "thin"),
    ("heavy", "light"),
    ("first", "last"),
    ("win", "lose"),
    ("buy", "sell"),
    ("push", "pull"),
    ("give", "take"),
    ("true", "false"),
    ("good", "bad"),
    ("day", "night"),
    ("begin", "end"),
    ("inside", "outside"),
    ("left", "right"),
    ("above", "below"),
    ("before", "after"),
    ("friend", "enemy"),
    ("love", "hate"),
    ("alive", "dead"),
    ("cheap", "expensive"),
    ("safe", "dangerous"),
    ("easy", "difficult"),
    ("near", "far"),
    ("north", "south"),
    ("east", "west"),
    ("question", "answer"),
    ("arrive", "leave"),
    ("remember", "forget"),
    ("accept", "refuse"),
    ("increase", "decrease"),
    ("always", "never"),
    ("sweet", "sour"),
    ("wide", "narrow"),
    ("deep", "shallow"),
    ("brave", "afraid"),
    ("polite", "rude"),
    ("smooth", "rough"),
    ("tall", "short"),
    ("top", "bottom"),
    ("front", "back"),
    ("more", "less"),
    ("max", "min"),
    ("black", "white"),
    ("boy", "girl"),
    ("king", "queen"),
    ("husband", "wife"),
    ("summer", "winter"),
    ("sunrise", "sunset"),
    ("entrance", "exit"),
    ("import", "export"),
    ("public", "private"),
    ("major", "minor"),
    ("positive", "negative"),
    ("ancient", "modern"),
    ("asleep", "awake"),
    ("borrow", "lend"),
    ("catch", "throw"),
    ("laugh", "cry"),
    ("noisy", "silent"),
    ("guilty", "innocent"),
    ("victory", "defeat"),
    ("visible", "hidden"),
)

#: (subject, question, correct answer, three wrong answers)
FACTS: tuple[tuple[str, str, str, tuple[str, str, str]], ...] = (
    ("geography", "What is the capital of France?", "Paris", ("Berlin", "Madrid", "Rome")),
    ("geography", "What is the capital of Germany?", "Berlin", ("Vienna", "Paris", "Warsaw")),
    ("geography", "What is the capital of Italy?", "Rome", ("Milan", "Athens", "Lisbon")),
    ("geography", "What is the capital of Spain?", "Madrid", ("Barcelona", "Lisbon", "Paris")),
    ("geography", "What is the capital of Japan?", "Tokyo", ("Beijing", "Seoul", "Osaka")),
    ("geography", "What is the capital of China?", "Beijing", ("Shanghai", "Tokyo", "Seoul")),
    (
        "geography",
        "What is the capital of the United Kingdom?",
        "London",
        ("Dublin", "Paris", "Edinburgh"),
    ),
    ("geography", "What is the capital of Russia?", "Moscow", ("Kiev", "Warsaw", "Minsk")),
    ("geography", "What is the capital of Canada?", "Ottawa", ("Toronto", "Montreal", "Vancouver")),
    (
        "geography",
        "What is the capital of Australia?",
        "Canberra",
        ("Sydney", "Melbourne", "Perth"),
    ),
    ("geography", "What is the capital of Egypt?", "Cairo", ("Alexandria", "Tunis", "Rabat")),
    ("geography", "What is the capital of India?", "New Delhi", ("Mumbai", "Kolkata", "Chennai")),
    (
        "geography",
        "What is the capital of Brazil?",
        "Brasilia",
        ("Rio de Janeiro", "Sao Paulo", "Lima"),
    ),
    ("geography", "What is the capital of Mexico?", "Mexico City", ("Cancun", "Madrid", "Bogota")),
    ("geography", "What is the capital of Korea?", "Seoul", ("Busan", "Tokyo", "Beijing")),
    ("geography", "What is the capital of Greece?", "Athens", ("Sparta", "Rome", "Sofia")),
    ("geography", "What is the capital of Portugal?", "Lisbon", ("Porto", "Madrid", "Seville")),
    (
        "geography",
        "What is the capital of Sweden?",
        "Stockholm",
        ("Oslo", "Helsinki", "Copenhagen"),
    ),
    (
        "geography",
        "What is the largest ocean on Earth?",
        "the Pacific Ocean",
        ("the Atlantic Ocean", "the Indian Ocean", "the Arctic Ocean"),
    ),
    ("geography", "Which continent is Egypt in?", "Africa", ("Asia", "Europe", "South America")),
    ("geography", "Which continent is Brazil in?", "South America", ("Africa", "Europe", "Asia")),
    (
        "geography",
        "What is the longest river in Africa?",
        "the Nile",
        ("the Amazon", "the Danube", "the Thames"),
    ),
    ("science", "What colour is the sky on a clear day?", "blue", ("green", "red", "yellow")),
    ("science", "What colour is grass?", "green", ("blue", "purple", "orange")),
    (
        "science",
        "What colour do you get by mixing blue and yellow?",
        "green",
        ("red", "purple", "orange"),
    ),
    (
        "science",
        "What colour do you get by mixing red and white?",
        "pink",
        ("green", "blue", "black"),
    ),
    ("science", "What is the chemical formula of water?", "H2O", ("CO2", "O2", "NaCl")),
    ("science", "Which planet is closest to the Sun?", "Mercury", ("Venus", "Mars", "Jupiter")),
    ("science", "Which planet is known as the red planet?", "Mars", ("Venus", "Saturn", "Neptune")),
    (
        "science",
        "What is the largest planet in the solar system?",
        "Jupiter",
        ("Earth", "Mars", "Mercury"),
    ),
    (
        "science",
        "What gas do plants take in from the air?",
        "carbon dioxide",
        ("oxygen", "helium", "hydrogen"),
    ),
    ("science", "What do bees make?", "honey", ("milk", "silk", "wool")),
    (
        "science",
        "At what temperature in Celsius does water boil at sea level?",
        "100 degrees",
        ("50 degrees", "0 degrees", "200 degrees"),
    ),
    (
        "science",
        "At what temperature in Celsius does water freeze?",
        "0 degrees",
        ("100 degrees", "10 degrees", "32 degrees"),
    ),
    (
        "science",
        "What is the closest star to the Earth?",
        "the Sun",
        ("the Moon", "Mars", "Sirius"),
    ),
    ("science", "What does a thermometer measure?", "temperature", ("weight", "length", "time")),
    (
        "animals",
        "Which animal is known as the king of the jungle?",
        "the lion",
        ("the mouse", "the rabbit", "the cow"),
    ),
    ("animals", "How many legs does a spider have?", "eight", ("six", "four", "ten")),
    ("animals", "How many legs does a dog have?", "four", ("two", "six", "eight")),
    ("animals", "What animal says moo?", "a cow", ("a cat", "a dog", "a duck")),
    ("animals", "What animal barks?", "a dog", ("a cat", "a fish", "a horse")),
    (
        "animals",
        "Which animal has a long trunk?",
        "the elephant",
        ("the giraffe", "the zebra", "the lion"),
    ),
    (
        "animals",
        "Which animal has a very long neck?",
        "the giraffe",
        ("the elephant", "the pig", "the sheep"),
    ),
    ("animals", "What do caterpillars turn into?", "butterflies", ("spiders", "birds", "frogs")),
    ("animals", "Where do fish live?", "in water", ("in trees", "in the desert", "in the sky")),
    ("animals", "What is a baby cat called?", "a kitten", ("a puppy", "a calf", "a foal")),
    ("animals", "What is a baby dog called?", "a puppy", ("a kitten", "a lamb", "a chick")),
    ("units", "How many days are in a week?", "seven", ("five", "ten", "twelve")),
    ("units", "How many months are in a year?", "twelve", ("ten", "seven", "twenty")),
    ("units", "How many hours are in a day?", "twenty-four", ("twelve", "sixty", "ten")),
    (
        "units",
        "How many minutes are in an hour?",
        "sixty",
        ("one hundred", "twenty-four", "thirty"),
    ),
    ("units", "How many seconds are in a minute?", "sixty", ("ten", "one hundred", "twelve")),
    (
        "units",
        "How many centimetres are in a metre?",
        "one hundred",
        ("ten", "one thousand", "sixty"),
    ),
    ("units", "How many grams are in a kilogram?", "one thousand", ("one hundred", "ten", "sixty")),
    ("units", "How many sides does a triangle have?", "three", ("four", "five", "six")),
    ("units", "How many sides does a square have?", "four", ("three", "five", "eight")),
    ("calendar", "Which month comes after January?", "February", ("March", "December", "June")),
    ("calendar", "Which day comes after Monday?", "Tuesday", ("Sunday", "Friday", "Thursday")),
    ("calendar", "Which day comes before Saturday?", "Friday", ("Sunday", "Monday", "Wednesday")),
    ("calendar", "Which season comes after winter?", "spring", ("autumn", "summer", "winter")),
    (
        "calendar",
        "What is the last month of the year?",
        "December",
        ("January", "November", "October"),
    ),
    ("language", "What is the plural of child?", "children", ("childs", "childes", "child")),
    ("language", "What is the past tense of go?", "went", ("goed", "gone", "going")),
    ("language", "What is the plural of mouse?", "mice", ("mouses", "mouse", "meese")),
    ("language", "Which word is a colour?", "yellow", ("table", "run", "quickly")),
    ("language", "Which word is a number?", "seven", ("green", "house", "slowly")),
)


def _question(
    qid: str, subject: str, text: str, options: Sequence[str], answer: int
) -> dict[str, Any]:
    return {
        "id": qid,
        "subject": subject,
        "context": f"Question: {text}\nAnswer:",
        "choices": list(options),
        "answer": answer,
    }


def _shuffle_in(rng: random.Random, correct: str, wrong: Sequence[str]) -> tuple[list[str], int]:
    options = [correct, *wrong]
    rng.shuffle(options)
    return options, options.index(correct)


def arithmetic_set(n: int = 150, seed: int = ARITHMETIC_SEED) -> list[dict[str, Any]]:
    """``n`` one-step questions; distractors are near misses of the true result."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    ops = ("plus", "minus", "times")
    while len(out) < n:
        op = ops[len(out) % 3]
        if op == "times":
            a, b = rng.randint(2, 12), rng.randint(2, 12)
            value = a * b
        elif op == "plus":
            a, b = rng.randint(2, 60), rng.randint(2, 60)
            value = a + b
        else:
            a = rng.randint(10, 99)
            b = rng.randint(1, a - 1)
            value = a - b
        near = {value + 1, value - 1, value + 10, value - 10, value + 2}
        if value >= 10:
            near.add(int(str(value)[::-1]))
        wrong = sorted(v for v in near if v > 0 and v != value)
        picks = rng.sample(wrong, 3)
        options, idx = _shuffle_in(rng, str(value), [str(v) for v in picks])
        out.append(
            _question(f"arith-{len(out):03d}", "arithmetic", f"What is {a} {op} {b}?", options, idx)
        )
    return out


def antonym_set(seed: int = ANTONYM_SEED) -> list[dict[str, Any]]:
    """One question per pair; wrong options are other pairs' answers (never a synonym of the word)."""
    rng = random.Random(seed)
    answers = sorted({b for _, b in ANTONYMS})
    out: list[dict[str, Any]] = []
    for i, (word, opposite) in enumerate(ANTONYMS):
        pool = [w for w in answers if w not in (word, opposite)]
        options, idx = _shuffle_in(rng, opposite, rng.sample(pool, 3))
        out.append(
            _question(
                f"antonym-{i:03d}", "antonyms", f'What is the opposite of "{word}"?', options, idx
            )
        )
    return out


def fact_set(seed: int = FACT_SEED) -> list[dict[str, Any]]:
    """The hand-written :data:`FACTS`, options shuffled."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i, (subject, text, correct, wrong) in enumerate(FACTS):
        options, idx = _shuffle_in(rng, correct, wrong)
        out.append(_question(f"fact-{i:03d}", subject, text, options, idx))
    return out


def write_sets(directory: Path) -> dict[str, int]:
    """Write the three sets as JSONL under ``directory``; returns question counts."""
    directory.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for name, records in (
        ("arithmetic", arithmetic_set()),
        ("antonyms", antonym_set()),
        ("facts", fact_set()),
    ):
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        (directory / f"{name}.jsonl").write_text(text, encoding="utf-8")
        counts[name] = len(records)
    return counts


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    target = Path(__file__).resolve().parent.parent / "assets" / "mcq"
    print(write_sets(target))
