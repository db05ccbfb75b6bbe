"""Rule-based prompt categories: one or more real-looking prompts per rule, and length tiers."""

from __future__ import annotations

import pytest

from gate.data.categorize import (
    CATEGORIES,
    SHORT_MAX_TOKENS,
    classify,
    detect_language,
    length_tier,
    strip_noise,
)

CASES = [
    ("How do I read a CSV file with pandas in Python and drop empty rows?", "code", None),
    ("```\nint main() { return 0; }\n```\nwhy does this not print anything", "code", None),
    ("Write a function in JavaScript that reverses a string", "code", None),
    ("What is 17 * 23 + 4?", "math", None),
    ("Explain how to compute the derivative of x^2 sin x", "math", None),
    ("Solve the equation 3 x + 5 = 20", "math", None),
    (
        "What marketing strategy should a SaaS startup use to find its first customers?",
        "knowledge",
        "business",
    ),
    (
        "Can my landlord keep the deposit if the contract has no clause about it? Is that legal?",
        "knowledge",
        "law",
    ),
    (
        "What are the symptoms of diabetes and which treatment do doctors recommend?",
        "knowledge",
        "medicine",
    ),
    ("请帮我写一首关于春天的诗", "non_english", "chinese"),
    ("日本の首都はどこですか？東京について教えてください。", "non_english", "japanese"),
    ("한국의 전통 음식에 대해 알려주세요", "non_english", "korean"),
    ("Расскажи мне о истории Москвы", "non_english", "russian"),
    (
        "Peux-tu m'expliquer pourquoi le ciel est bleu et comment la lumière est diffusée ?",
        "non_english",
        "french",
    ),
    (
        "¿Cómo puedo mejorar mi español? Quiero hablar con más fluidez y leer libros en el idioma.",
        "non_english",
        "spanish",
    ),
    (
        "Kannst du mir bitte erklären, wie das Wetter in Berlin ist und was ich mit den Kindern machen kann?",
        "non_english",
        "german",
    ),
    (
        "Translate the following sentence into French: the cat sleeps on the sofa.",
        "translation",
        None,
    ),
    ("请把这段话翻译成英文：我喜欢学习。", "translation", None),
    (
        "Summarize this article in three sentences: The city council met on Monday ...",
        "summarization",
        None,
    ),
    ("tl;dr of the plot of Hamlet please", "summarization", None),
    ("Write a short poem about autumn leaves", "chat", None),
    ("hi, how are you today?", "chat", None),
    ("I am a bit bored. Tell me a joke about penguins.", "chat", None),
]


@pytest.mark.parametrize(("text", "category", "tag"), CASES)
def test_classify_examples(text: str, category: str, tag: str | None) -> None:
    got = classify(text)
    assert (got.category, got.tag) == (category, tag), got.rule
    assert got.category in CATEGORIES and got.rule


def test_every_category_is_reachable() -> None:
    assert {c for _, c, _ in CASES} == set(CATEGORIES)


def test_ranges_and_dates_are_not_math() -> None:
    assert classify("Give me a score from 1-10 for each idea").category != "math"
    assert classify("The meeting is on 3/7 at noon, can you remind me").category != "math"


def test_browser_translate_residue_is_noise() -> None:
    text = "What are the 10 issues of ASEAN recently?        지금 번역하기"
    assert strip_noise(text) == "What are the 10 issues of ASEAN recently?"
    assert classify(text).category != "translation"
    assert detect_language(strip_noise(text)) is None


def test_english_with_a_few_foreign_words_stays_english() -> None:
    assert detect_language("What does the French word bonjour mean, and how is it used?") is None
    assert detect_language("I love sushi and ramen") is None


def test_length_tier_boundaries() -> None:
    assert length_tier(0) == "short"
    assert length_tier(SHORT_MAX_TOKENS - 1) == "short"
    assert length_tier(SHORT_MAX_TOKENS) == "medium"
    assert length_tier(127) == "medium"
    assert length_tier(128) == "long"


def test_sharegpt_export_residue_is_removed() -> None:
    assert strip_noise(
        "Is there a way to link moviepy and mediaconvert?\n \n \n \n Translate now"
    ) == ("Is there a way to link moviepy and mediaconvert?")
    assert (
        strip_noise("give me 10 ideas.\n\nPlease write in English language.") == "give me 10 ideas."
    )
    assert strip_noise("What makes OODA the greatest1 / 1") == "What makes OODA the greatest"
    assert strip_noise("What is 3 / 4") == "What is 3 / 4"
    assert (
        classify("Let's start the session with today's date\n \n \n \n Translate now").category
        == "chat"
    )
