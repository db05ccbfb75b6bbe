"""thresholds.toml loading and the generic settings builder."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from gate.config import build_dataclass, load_toml
from gate.errors import ConfigError, ExitCode
from gate.gating.thresholds import (
    Bound,
    load_thresholds,
    packaged_thresholds_path,
    parse_thresholds,
)
from gate.metrics.registry import all_metrics

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "thresholds.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _error(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_thresholds(_write(tmp_path, text))
    err = info.value
    assert err.exit_code == ExitCode.USAGE_ERROR
    assert "\n" not in err.format_line()
    return err


def test_packaged_copy_matches_the_repo_file() -> None:
    assert (REPO / "thresholds.toml").read_bytes() == packaged_thresholds_path().read_bytes()


def test_shipped_defaults_load_and_are_consistent() -> None:
    t = load_thresholds(packaged_thresholds_path())
    assert t.alpha == 0.01 and t.min_samples >= 1
    assert set(t.metrics) <= set(all_metrics())
    for name, threshold in t.metrics.items():
        assert threshold.metric == name
        for bound in (threshold.bound, *threshold.categories.values()):
            assert 0 <= bound.warn <= bound.critical
            assert math.isfinite(bound.critical)
    cga = t.for_metric("fidelity.cga")
    assert cga is not None
    assert cga.bound_for("category:math").critical < cga.bound.critical
    assert cga.bound_for("category:chat") == cga.bound
    assert t.for_metric("fidelity.kl_max") is None  # reported, not gated


def test_one_bound_gives_the_other(tmp_path: Path) -> None:
    t = load_thresholds(
        _write(
            tmp_path,
            """
[metrics."accuracy.mcq_acc"]
warn = 0.03
[metrics."accuracy.perplexity"]
mode = "relative"
critical = 0.1
""",
        )
    )
    assert t.metrics["accuracy.mcq_acc"].bound == Bound(warn=0.03, critical=0.06, mode="absolute")
    assert t.metrics["accuracy.perplexity"].bound == Bound(0.05, 0.1, "relative")
    assert t.alpha == 0.01 and t.metrics["accuracy.mcq_acc"].min_samples == t.min_samples


def test_category_overrides_inherit_mode_and_min_samples(tmp_path: Path) -> None:
    t = load_thresholds(
        _write(
            tmp_path,
            """
[gate]
alpha = 0.05
min_samples = 7
[metrics."latency.ttft_p50"]
mode = "relative"
warn = 0.1
min_samples = 15
[metrics."latency.ttft_p50".categories]
"length:long" = { warn = 0.2 }
""",
        )
    )
    m = t.metrics["latency.ttft_p50"]
    assert (t.alpha, t.min_samples, m.min_samples) == (0.05, 7, 15)
    assert m.bound_for("length:long") == Bound(0.2, 0.4, "relative")
    assert m.bound_for(None) == Bound(0.1, 0.2, "relative")


def test_misspelled_metric_suggests_the_right_name(tmp_path: Path) -> None:
    err = _error(tmp_path, '[metrics."fidelity.cgaa"]\nwarn = 0.1\n')
    assert "fidelity.cgaa" in err.message
    assert "did you mean 'fidelity.cga'" in (err.hint or "")


@pytest.mark.parametrize(
    ("text", "bad", "suggestion"),
    [
        ("[gate]\nalpah = 0.01\n", "alpah", "alpha"),
        ("[gaet]\nalpha = 0.01\n", "gaet", "gate"),
        ('[metrics."accuracy.mcq_acc"]\nwran = 0.01\n', "wran", "warn"),
        (
            '[metrics."accuracy.mcq_acc"]\nwarn = 0.02\ncategories = { "category:math" = { warm = 0.1 } }\n',
            "warm",
            "warn",
        ),
        ("[tiers.latncy]\nruns = 3\n", "latncy", "latency"),
    ],
)
def test_unknown_keys_fail_with_did_you_mean(
    tmp_path: Path, text: str, bad: str, suggestion: str
) -> None:
    err = _error(tmp_path, text)
    assert bad in err.message
    assert f"did you mean {suggestion!r}" in (err.hint or "")


@pytest.mark.parametrize(
    ("value", "words"),
    [("nan", "nan"), ("-0.05", "negative"), ("inf", "inf"), ('"high"', "number")],
)
def test_bad_bounds(tmp_path: Path, value: str, words: str) -> None:
    err = _error(tmp_path, f'[metrics."fidelity.cga"]\nwarn = {value}\n')
    assert words in err.message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[metrics."fidelity.cga"]\nwarn = 0.2\ncritical = 0.1\n', "past critical"),
        ('[metrics."fidelity.cga"]\nmode = "percent"\nwarn = 0.1\n', "not a mode"),
        ('[metrics."fidelity.cga"]\nmode = "absolute"\n', "no bound"),
        ('[metrics."fidelity.cga"]\nwarn = 0.1\nmin_samples = 0\n', "positive integer"),
        ('[metrics."fidelity.cga"]\nwarn = 0.1\nhigher_is_better = false\n', "higher-is-better"),
        (
            '[metrics."fidelity.cga"]\nwarn = 0.1\ncategories = { math = { warn = 0.1 } }\n',
            "kind:value",
        ),
        ("[gate]\nalpha = 0.7\n", "outside"),
    ],
)
def test_invalid_values(tmp_path: Path, text: str, words: str) -> None:
    assert words in _error(tmp_path, text).message


def test_bad_toml_names_file_and_line(tmp_path: Path) -> None:
    err = _error(tmp_path, "[gate]\nalpha = 0.01\nmin_samples = = 3\n")
    assert f"{tmp_path / 'thresholds.toml'}:3" in err.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_thresholds(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_toml(tmp_path / "nope.toml")


def test_default_path_prefers_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_thresholds().source == str(packaged_thresholds_path())
    _write(tmp_path, '[metrics."fidelity.cga"]\nwarn = 0.2\n')
    t = load_thresholds()
    assert t.source == str(tmp_path / "thresholds.toml")
    assert list(t.metrics) == ["fidelity.cga"]


def test_tier_settings_are_kept_for_the_tiers(tmp_path: Path) -> None:
    t = load_thresholds(_write(tmp_path, "[tiers.latency]\nruns = 5\n"))
    assert t.tier_settings("latency") == {"runs": 5}
    assert t.tier_settings("fidelity") == {}


def test_parse_with_explicit_specs() -> None:
    from gate.metrics.metric_spec import MetricSpec, SampleKind

    specs = {"x.m": MetricSpec("x.m", "", True, SampleKind.POINT, "test")}
    t = parse_thresholds({"metrics": {"x.m": {"warn": 1}}}, source="inline", specs=specs)
    assert t.metrics["x.m"].bound == Bound(1.0, 2.0)
    with pytest.raises(ConfigError, match="unknown metric"):
        parse_thresholds({"metrics": {"fidelity.cga": {"warn": 1}}}, source="inline", specs=specs)


# ---------------------------------------------------------------- build_dataclass


@dataclass(frozen=True)
class _Inner:
    k: int = 5


@dataclass(frozen=True)
class _Settings:
    runs: int
    warmup: int = 2
    ratio: float = 0.5
    name: str = "x"
    device: Literal["cpu", "cuda"] = "cpu"
    batch_sizes: tuple[int, ...] = (1,)
    limit: int | None = None
    enabled: bool = True
    extra: Mapping[str, float] = field(default_factory=dict)
    inner: _Inner = field(default_factory=_Inner)

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ValueError("runs must be >= 1")


def test_build_dataclass_accepts_well_typed_tables() -> None:
    s = build_dataclass(
        _Settings,
        {
            "runs": 3,
            "ratio": 1,
            "device": "cuda",
            "batch_sizes": [1, 2, 4],
            "limit": 7,
            "enabled": False,
            "extra": {"a": 1.5},
            "inner": {"k": 9},
        },
        where="tiers.latency",
    )
    assert s == _Settings(
        runs=3,
        ratio=1.0,
        device="cuda",
        batch_sizes=(1, 2, 4),
        limit=7,
        enabled=False,
        extra={"a": 1.5},
        inner=_Inner(9),
    )
    assert isinstance(s.ratio, float)


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"runz": 3}, "unknown key 'runz'"),
        ({}, "missing key 'runs'"),
        ({"runs": "3"}, "expected an integer"),
        ({"runs": True}, "expected an integer"),
        ({"runs": 3, "ratio": float("nan")}, "finite"),
        ({"runs": 3, "device": "tpu"}, "not one of"),
        ({"runs": 3, "batch_sizes": [1, "2"]}, "batch_sizes[1]"),
        ({"runs": 3, "enabled": 1}, "true or false"),
        ({"runs": 3, "inner": {"j": 1}}, "unknown key 'j'"),
        ({"runs": 0}, "runs must be >= 1"),
    ],
)
def test_build_dataclass_refuses_bad_tables(table: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_dataclass(_Settings, table, where="tiers.latency")
    assert words in info.value.message
    assert info.value.message.startswith("tiers.latency")


def test_build_dataclass_suggests_close_keys() -> None:
    with pytest.raises(ConfigError) as info:
        build_dataclass(_Settings, {"runs": 1, "warmpu": 1}, where="tiers.latency")
    assert "did you mean 'warmup'" in (info.value.hint or "")
