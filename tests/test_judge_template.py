"""gate.judge.template: versions, placeholders, one-pass filling and token clipping."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from gate.errors import ConfigError, ExitCode
from gate.judge.template import (
    CLIP_MARKER,
    FieldLimits,
    clip_tokens,
    default_template,
    load_template,
)

ASSETS = Path(__file__).resolve().parent.parent / "gate" / "assets" / "judge"


class CharCodec:
    """One token per character: clipping lengths can be checked by hand."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i) for i in ids)


def test_default_templates_carry_their_placeholders_and_file_hash() -> None:
    for kind in ("pairwise", "validity"):
        t = default_template(kind)
        data = (ASSETS / f"{kind}.txt").read_bytes()
        assert t.version == hashlib.sha256(data).hexdigest()[:16]
        assert t.kind == kind
    assert "{response_a}" in default_template("pairwise").text
    assert "{response}" in default_template("validity").text


def test_any_edit_makes_a_new_version(tmp_path: Path) -> None:
    original = default_template("pairwise")
    path = tmp_path / "p.txt"
    path.write_text(original.text + "\n", encoding="utf-8")
    assert load_template(path, "pairwise").version != original.version


def test_fill_is_one_pass() -> None:
    t = default_template("pairwise")
    out = t.fill({"prompt": "P {response_b}", "response_a": "{prompt}", "response_b": "bee"})
    assert "P {response_b}" in out
    assert "\n{prompt}\n" in out
    assert out.count("bee") == 1


@pytest.mark.parametrize(
    ("text", "kind", "missing"),
    [
        ("Compare {prompt} and {response_a}", "pairwise", "{response_b}"),
        ("Is {response} fine?", "validity", "{prompt}"),
        ("no placeholders at all", "validity", "{prompt} {response}"),
    ],
)
def test_template_without_its_placeholders_is_a_config_error(
    tmp_path: Path, text: str, kind: str, missing: str
) -> None:
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_template(path, kind)  # type: ignore[arg-type]
    assert err.value.exit_code is ExitCode.USAGE_ERROR
    line = err.value.format_line()
    assert missing in line and str(path) in line and "\n" not in line


def test_unreadable_and_non_utf8_templates_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_template(tmp_path / "absent.txt", "pairwise")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("{prompt} {response} caf\xe9".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_template(bad, "validity")


def test_clip_keeps_head_marker_and_tail() -> None:
    codec = CharCodec()
    text = "".join(chr(ord("a") + i % 26) for i in range(100))
    assert clip_tokens(text, 100, codec) is text
    out = clip_tokens(text, 47, codec, head_share=0.75)
    keep = 47 - len(CLIP_MARKER)
    head = round(0.75 * keep)
    assert out == text[:head] + CLIP_MARKER + text[100 - (keep - head) :]
    assert len(out) == 47


def test_render_clips_each_field_to_its_limit() -> None:
    codec = CharCodec()
    t = default_template("pairwise")
    limits = FieldLimits(prompt=20, response=30, prompt_head=0.5, response_head=0.75)
    fields = {"prompt": "p" * 50, "response_a": "a" * 50, "response_b": "short"}
    out = t.render(fields, limits, codec)
    assert out == t.fill(
        {
            "prompt": clip_tokens("p" * 50, 20, codec, 0.5),
            "response_a": clip_tokens("a" * 50, 30, codec, 0.75),
            "response_b": "short",
        }
    )
    assert t.render(fields) == t.fill(fields)


def test_field_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="field limits must be >= 16 tokens"):
        FieldLimits(prompt=4, response=64)
    with pytest.raises(ValueError, match=r"head share 1\.5 outside \[0, 1\]"):
        FieldLimits(prompt=64, response=64, response_head=1.5)
