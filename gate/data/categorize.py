"""A transparent, rule-based category for a user prompt, and its length tier.

Fidelity metrics are reported per category and per length tier (docs/metrics.md
"Fidelity"). The classifier is a fixed
list of rules tried in order; the first that fires decides, and the result says
which rule it was, so any label can be explained and a wrong one fixed by
editing a keyword list.

Rules, in priority order (after removing :data:`NOISE_PATTERNS`):

0. ``code``: a code fence (or an indented line ending in code punctuation).
1. ``translation``: a translate keyword in English or another language.
2. ``non_english`` (tag = language): at least 30 % of the letters are in one non-Latin
   script (kana -> japanese, Hangul -> korean, Han -> chinese, Cyrillic -> russian or
   ukrainian, Arabic, Hebrew, Devanagari -> hindi, Thai, Greek); or, for Latin script, the
   stop-word rate of one language is at least 15 % of the words, at least three hits,
   and above the English rate.
3. ``summarization``: summarize / summary / tl;dr / key points.
4. ``code``: a code fence, or a strong programming keyword (a language, ``def f(``,
   ``import x`` ...) plus at least one more programming keyword.
5. ``math``: an arithmetic expression, or mathematics keywords.
6. ``knowledge`` (tag = business, law or medicine): the domain with most keyword hits,
   at least two hits.
7. ``code`` again when three or more weak programming keywords remain; else ``chat``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CATEGORIES",
    "LENGTH_TIERS",
    "Classification",
    "classify",
    "detect_language",
    "length_tier",
    "strip_noise",
]

CATEGORIES: tuple[str, ...] = (
    "code",
    "math",
    "knowledge",
    "non_english",
    "translation",
    "summarization",
    "chat",
)

#: Length tiers by prompt token count (demo tokenizer): short < 32 <= medium < 128 <= long.
LENGTH_TIERS: tuple[str, ...] = ("short", "medium", "long")
SHORT_MAX_TOKENS = 32
MEDIUM_MAX_TOKENS = 128


@dataclass(frozen=True)
class Classification:
    """``category`` from :data:`CATEGORIES`, an optional ``tag`` and the ``rule`` that fired."""

    category: str
    tag: str | None
    rule: str


# --- script ranges ------------------------------------------------------------------

_SCRIPTS: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = (
    ("kana", ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))),
    ("hangul", ((0xAC00, 0xD7AF), (0x1100, 0x11FF), (0x3130, 0x318F))),
    ("han", ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xF900, 0xFAFF))),
    ("cyrillic", ((0x0400, 0x04FF),)),
    ("arabic", ((0x0600, 0x06FF), (0x0750, 0x077F))),
    ("hebrew", ((0x0590, 0x05FF),)),
    ("devanagari", ((0x0900, 0x097F),)),
    ("thai", ((0x0E00, 0x0E7F),)),
    ("greek", ((0x0370, 0x03FF),)),
)

_SCRIPT_LANGUAGE = {
    "hangul": "korean",
    "han": "chinese",
    "arabic": "arabic",
    "hebrew": "hebrew",
    "devanagari": "hindi",
    "thai": "thai",
    "greek": "greek",
}

NON_LATIN_MIN_SHARE = 0.3
STOPWORD_MIN_RATE = 0.15
STOPWORD_MIN_HITS = 3

STOPWORDS: dict[str, frozenset[str]] = {
    "english": frozenset(
        [
            "the",
            "and",
            "is",
            "are",
            "of",
            "to",
            "in",
            "that",
            "it",
            "for",
            "you",
            "with",
            "this",
            "be",
            "on",
            "what",
            "how",
            "can",
            "i",
            "my",
            "your",
            "was",
            "have",
            "not",
            "do",
        ]
    ),
    "french": frozenset(
        [
            "le",
            "la",
            "les",
            "des",
            "est",
            "une",
            "et",
            "pour",
            "dans",
            "que",
            "qui",
            "pas",
            "sur",
            "vous",
            "je",
            "avec",
            "ce",
            "du",
            "au",
            "sont",
            "mais",
            "nous",
            "il",
            "elle",
        ]
    ),
    "spanish": frozenset(
        [
            "el",
            "los",
            "las",
            "del",
            "es",
            "una",
            "por",
            "para",
            "con",
            "que",
            "y",
            "en",
            "se",
            "su",
            "como",
            "pero",
            "más",
            "está",
            "qué",
            "cómo",
            "yo",
            "lo",
            "muy",
        ]
    ),
    "german": frozenset(
        [
            "der",
            "die",
            "das",
            "und",
            "ist",
            "nicht",
            "ein",
            "eine",
            "ich",
            "mit",
            "zu",
            "den",
            "von",
            "auf",
            "für",
            "sie",
            "es",
            "wie",
            "auch",
            "dem",
            "wir",
            "bitte",
        ]
    ),
    "portuguese": frozenset(
        [
            "o",
            "os",
            "não",
            "uma",
            "com",
            "para",
            "que",
            "do",
            "da",
            "em",
            "é",
            "você",
            "por",
            "mais",
            "como",
            "está",
            "isso",
            "ao",
            "são",
        ]
    ),
    "italian": frozenset(
        [
            "il",
            "di",
            "che",
            "è",
            "non",
            "per",
            "una",
            "con",
            "sono",
            "della",
            "gli",
            "come",
            "anche",
            "questo",
            "mi",
            "nel",
            "le",
        ]
    ),
    "dutch": frozenset(
        [
            "de",
            "het",
            "een",
            "en",
            "van",
            "is",
            "niet",
            "dat",
            "op",
            "voor",
            "met",
            "zijn",
            "ik",
            "je",
            "wat",
        ]
    ),
}

# --- keyword lists ----------------------------------------------------------------------

_TRANSLATION = re.compile(
    r"\btranslat\w*|\btraduc\w*|\btraduire\b|\btradu[sz]\w*|\bübersetz\w*|\bперев[оe]д\w*|"
    r"翻译|翻譯|翻訳|번역|"
    r"\b(?:into|to|in) (?:english|french|spanish|german|chinese|japanese|korean|russian|"
    r"italian|portuguese|arabic|hindi|vietnamese)\b(?=[^.?!\n]{0,40}[:.\n])",
    re.IGNORECASE,
)
_SUMMARY = re.compile(
    r"\bsummari[sz]\w*|\bsummary\b|\btl;?dr\b|\bkey points\b|\bmain (?:ideas|points)\b|"
    r"\bin a nutshell\b|\bbrief overview\b",
    re.IGNORECASE,
)
_CODE_FENCE = re.compile(r"```|^\s{4,}\S.*[;{}()]\s*$", re.MULTILINE)
_CODE_STRONG = re.compile(
    r"\b(?:python|javascript|typescript|java|c\+\+|c#|golang|rust|php|ruby|kotlin|swift|"
    r"sql|html|css|react|node\.?js|django|flask|pandas|numpy|regex|bash|powershell|"
    r"dockerfile|kubernetes|api|json|yaml|github|compile[rd]?|debug\w*|stack ?trace)\b|"
    r"\bdef \w+\(|\bfunction\s*\w*\(|\bclass \w+[:({]|#include|\bimport \w+|=>|\bconsole\.log|"
    r"\bSELECT\b.+\bFROM\b",
    re.IGNORECASE,
)
_CODE_WEAK = re.compile(
    r"\b(?:code|coding|program\w*|script|function|variable|algorithm|database|query|"
    r"library|framework|error|bug|syntax|server|frontend|backend|app|software|"
    r"implement\w*|method|array|string|integer|loop)\b",
    re.IGNORECASE,
)
_MATH_EXPR = re.compile(r"\d+(?:\.\d+)?\s*[+*×÷^=]\s*\(?\d|\d+\s+[-/]\s+\(?\d")
_MATH_WORDS = re.compile(
    r"\b(?:math|maths|mathematics|mathematical|calculate|equations?|algebra\w*|geometry|"
    r"calculus|integral|derivative|probability|theorem|fraction|square root|logarithm|"
    r"polynomial|arithmetic)\b",
    re.IGNORECASE,
)
_KNOWLEDGE: dict[str, re.Pattern[str]] = {
    "business": re.compile(
        r"\b(?:business\w*|marketing|startup|sales|revenue|customers?|compan(?:y|ies)|"
        r"finance|financial|invest\w*|market|brand\w*|profit|pricing|strategy|"
        r"entrepreneur\w*|ecommerce|e-commerce|b2b|saas|stakeholders?|management|hr|"
        r"budget|accounting|tax(?:es)?|economy|economic\w*)\b",
        re.IGNORECASE,
    ),
    "law": re.compile(
        r"\b(?:law|laws|legal\w*|lawyer|attorney|court|contract\w*|regulation\w*|gdpr|"
        r"liabilit\w*|lawsuit|plaintiff|defendant|statute|copyright|trademark|patent|"
        r"compliance|jurisdiction|clause|tenant|landlord|judge)\b",
        re.IGNORECASE,
    ),
    "medicine": re.compile(
        r"\b(?:medical|medicine|patients?|disease\w*|symptoms?|doctors?|treatment\w*|"
        r"health\w*|drugs?|clinical|diagnos\w*|therapy|hospital|nurse|cancer|diabetes|"
        r"vaccine\w*|infection|surgery|pharma\w*|dose|mental health|anxiety|depression)\b",
        re.IGNORECASE,
    ),
}
KNOWLEDGE_MIN_HITS = 2

_WORD = re.compile(r"[^\W\d_]+")


def _script_counts(text: str) -> tuple[int, dict[str, int]]:
    letters = 0
    counts: dict[str, int] = {}
    for ch in text:
        if not ch.isalpha():
            continue
        letters += 1
        cp = ord(ch)
        for name, ranges in _SCRIPTS:
            if any(lo <= cp <= hi for lo, hi in ranges):
                counts[name] = counts.get(name, 0) + 1
                break
    return letters, counts


def _script_language(text: str) -> str | None:
    letters, counts = _script_counts(text)
    if not letters:
        return None
    cjk = counts.get("kana", 0) + counts.get("han", 0)
    if counts.get("kana", 0) and cjk / letters >= NON_LATIN_MIN_SHARE:
        return "japanese"
    best = max(counts, key=lambda k: counts[k], default=None)
    if best is None or best == "kana" or counts[best] / letters < NON_LATIN_MIN_SHARE:
        return None
    if best == "cyrillic":
        return "ukrainian" if re.search(r"[їєіґ]", text, re.IGNORECASE) else "russian"
    return _SCRIPT_LANGUAGE[best]


def _stopword_language(text: str) -> str | None:
    words = _WORD.findall(text.lower())
    if not words:
        return None
    rates = {lang: sum(w in sw for w in words) for lang, sw in STOPWORDS.items()}
    english = rates.pop("english")
    lang = max(rates, key=lambda k: (rates[k], k))
    hits = rates[lang]
    if hits >= STOPWORD_MIN_HITS and hits / len(words) >= STOPWORD_MIN_RATE and hits > english:
        return lang
    return None


def detect_language(text: str) -> str | None:
    """The non-English language of ``text`` by script share or stop words, else ``None``."""
    return _script_language(text) or _stopword_language(text)


#: Residue of browser extensions and the ShareGPT exporter, not prompt text: a translate
#: button (Korean and English), an injected "write in English" line, a "2 / 2" regeneration
#: counter at the end.
NOISE_PATTERNS: tuple[str, ...] = (
    r"지금 번역하기",
    r"\s*Translate now\s*$",
    r"\s*Please write in English language\.?",
    r"(\d+) / \1\s*$",
)
_NOISE = tuple(re.compile(p) for p in NOISE_PATTERNS)


def strip_noise(text: str) -> str:
    """``text`` without the :data:`NOISE_PATTERNS`, trimmed."""
    for pat in _NOISE:
        text = pat.sub("", text)
    return text.strip()


def classify(text: str) -> Classification:
    """Category of a user prompt by the first rule (module docstring) that fires."""
    text = strip_noise(text)
    if _CODE_FENCE.search(text):
        return Classification("code", None, "code-fence")
    if _TRANSLATION.search(text):
        return Classification("translation", None, "translation-keyword")
    lang = detect_language(text)
    if lang is not None:
        return Classification(
            "non_english", lang, "script" if _script_language(text) else "stopwords"
        )
    if _SUMMARY.search(text):
        return Classification("summarization", None, "summary-keyword")
    strong = len(_CODE_STRONG.findall(text))
    weak = len(_CODE_WEAK.findall(text))
    if strong >= 1 and strong + weak >= 2:
        return Classification("code", None, "code-keyword")
    if _MATH_EXPR.search(text) or _MATH_WORDS.search(text):
        return Classification("math", None, "math-expression-or-keyword")
    hits = {d: len(p.findall(text)) for d, p in _KNOWLEDGE.items()}
    domain = max(hits, key=lambda k: (hits[k], k))
    if hits[domain] >= KNOWLEDGE_MIN_HITS:
        return Classification("knowledge", domain, "domain-keywords")
    if weak >= 3:
        return Classification("code", None, "code-keyword")
    return Classification("chat", None, "default")


def length_tier(n_tokens: int) -> str:
    """``short`` (< 32 tokens), ``medium`` (< 128) or ``long``, by prompt token count."""
    if n_tokens < SHORT_MAX_TOKENS:
        return "short"
    if n_tokens < MEDIUM_MAX_TOKENS:
        return "medium"
    return "long"
