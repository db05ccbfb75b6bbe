"""gate.judge.normalize: fences, headings and whitespace, against hand-written results."""

from __future__ import annotations

import pytest

from gate.judge.normalize import normalize_response


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", ""),
        ("   \n\t \n", ""),
        ("plain text", "plain text"),
        ("a  b\t\tc   ", "a b c"),
        ("one\n\n\n\ntwo", "one\ntwo"),
        ("one\r\ntwo\rthree", "one\ntwo\nthree"),
        ("# Title\nbody", "Title\nbody"),
        ("### Sub  heading ###\ntext", "Sub heading\ntext"),
        ("# C# tips", "C# tips"),
        ("   ## indented heading", "indented heading"),
        ("    # four spaces is not a heading", "# four spaces is not a heading"),
        ("#hashtag stays", "#hashtag stays"),
        ("##\nafter an empty heading", "after an empty heading"),
        (
            "Here:\n```python\ndef f(x):\n    return  x\n```\nDone.",
            "Here:\ndef f(x):\n    return x\nDone.",
        ),
        ("```\n# a comment, not a heading\n```", "# a comment, not a heading"),
        ("~~~js\nlet a = 1;\n~~~", "let a = 1;"),
        # an unclosed fence (a reply cut off inside its code) is unwrapped too
        ("Code:\n```bash\nls   -la\n", "Code:\nls -la"),
        # a fence with an info string does not close a block: it is code
        ("```\nx\n```python\ny\n```", "x\n```python\ny"),
        # a longer closing fence closes a shorter opening one
        ("````\nx\n`````\n# head", "x\nhead"),
    ],
)
def test_normalize_cases(raw: str, expected: str) -> None:
    assert normalize_response(raw) == expected


def test_equal_inputs_stay_equal_and_styles_meet() -> None:
    plain = "Answer\nuse ls -la"
    fancy = "## Answer\n\n```bash\nuse ls   -la\n```\n\n"
    assert normalize_response(fancy) == normalize_response(plain) == plain


def test_normalization_keeps_words_in_order() -> None:
    text = "# Steps\n\n1. open  the file\n2. read it\n```\nprint('hi')\n```"
    words = [w for w in text.replace("#", " ").replace("`", " ").split() if w]
    assert normalize_response(text).split() == words
