"""``thresholds.toml`` -> frozen, validated dataclasses (docs/metrics.md "Severity and statistics").

Layout (every key is documented in the shipped ``thresholds.toml``)::

    [gate]
    alpha = 0.01          # level of the one-sided "candidate is worse" tests
    min_samples = 20      # fewer paired/repeated samples: judged on the point value alone
    power = 0.8           # the power at which each verdict's MDE is stated
    require_power = false # true: an underpowered verdict blocks (as --strict does)

    [metrics."fidelity.cga"]
    mode = "absolute"     # or "relative" (a fraction of |reference value|)
    warn = 0.02           # degradations are >= 0; the direction comes from the metric registry
    critical = 0.05       # defaults to 2 x warn when only one bound is given
    min_samples = 30      # optional per-metric override
    categories = { "category:math" = { warn = 0.01, critical = 0.02 } }

    [tiers.latency]       # tier settings: the tier name is checked here, the keys by
    runs = 20             # the session right after loading (gate.tiers.registry)

Validation happens here, at the edge: unknown keys and metric names fail with
a "did you mean", bounds must be finite and non-negative, ``warn <= critical``.
Every failure is a :class:`~gate.errors.ConfigError` (exit 4).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.config import check_keys, load_toml, suggest
from gate.errors import ConfigError
from gate.gating.power import DEFAULT_POWER
from gate.gating.thresholds_file import THRESHOLDS_FILE
from gate.gating.verdict import Bound, BoundMode
from gate.metrics.metric_spec import MetricSpec, SampleKind
from gate.metrics.registry import all_metrics, check_tier

#: Default level of the one-sided tests and default minimum sample count.
DEFAULT_ALPHA = 0.01
DEFAULT_MIN_SAMPLES = 20


@dataclass(frozen=True)
class MetricThreshold:
    """The bounds of one metric, with per-slice overrides (``"category:math"``)."""

    metric: str
    bound: Bound
    min_samples: int
    categories: Mapping[str, Bound] = field(default_factory=dict)

    def bound_for(self, slice: str | None) -> Bound:
        """The bound of ``slice`` when it has an override, else the metric's own bound."""
        if slice is not None and slice in self.categories:
            return self.categories[slice]
        return self.bound


@dataclass(frozen=True)
class Thresholds:
    """Everything ``thresholds.toml`` says, validated."""

    alpha: float
    min_samples: int
    metrics: Mapping[str, MetricThreshold]
    source: str
    #: Raw ``[tiers.<name>]`` tables (tier names checked). Their keys are validated by the
    #: session layer against the tier settings registry (:mod:`gate.tiers.registry`) as
    #: soon as the file is loaded; gating itself never imports the tiers.
    tiers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Gate a partly exercised tier's per-item metrics on the items its compression acted on.
    exercised_only: bool = False
    #: sha256 of what the file says (:func:`thresholds_digest`): two runs decided with the
    #: same bounds have the same digest, whatever the file's path, comments or key order.
    digest: str = ""
    #: The power at which each verdict's minimum detectable effect is stated.
    power: float = DEFAULT_POWER
    #: An underpowered verdict (critical bound below its MDE) blocks, as under ``--strict``.
    require_power: bool = False
    #: The raw ``[calibration]`` table a calibrated file carries (``gate calibrate``; read by
    #: :func:`gate.gating.calibration.reader.read_calibration`); empty when the file has none.
    calibration: Mapping[str, Any] = field(default_factory=dict)

    def for_metric(self, name: str) -> MetricThreshold | None:
        """The threshold of ``name``; ``None`` when the metric is reported but not gated."""
        return self.metrics.get(name)

    def tier_settings(self, tier: str) -> Mapping[str, Any]:
        """The ``[tiers.<tier>]`` table (empty when absent)."""
        return self.tiers.get(tier, {})


# --------------------------------------------------------------------- thresholds

_TOP_KEYS = ("gate", "metrics", "tiers", "calibration")
_GATE_KEYS = ("alpha", "min_samples", "exercised_only", "power", "require_power")
_BOUND_KEYS = ("warn", "critical", "mode")
_METRIC_KEYS = (*_BOUND_KEYS, "min_samples", "higher_is_better", "categories")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number, got {value!r}", "write a number, e.g. 0.05")
    if not math.isfinite(value):
        raise ConfigError(f"{where}: bound is {value}", "bounds must be finite numbers >= 0")
    if value < 0:
        raise ConfigError(
            f"{where}: negative bound {value}",
            "bounds are degradations (>= 0); the direction comes from the metric",
        )
    return float(value)


def _bound(table: Mapping[str, Any], where: str, *, default_mode: BoundMode) -> Bound:
    """``warn``/``critical``/``mode`` -> :class:`Bound`; one bound alone: critical = 2 x warn."""
    mode = table.get("mode", default_mode)
    if mode not in ("relative", "absolute"):
        raise ConfigError(f"{where}.mode: {mode!r} is not a mode", 'use "absolute" or "relative"')
    warn = _number(table["warn"], f"{where}.warn") if "warn" in table else None
    critical = _number(table["critical"], f"{where}.critical") if "critical" in table else None
    if warn is None and critical is None:
        raise ConfigError(f"{where}: no bound given", "set warn (critical defaults to 2 x warn)")
    if critical is None:
        assert warn is not None
        critical = 2.0 * warn
    if warn is None:
        warn = critical / 2.0
    if warn > critical:
        raise ConfigError(
            f"{where}: warn {warn} is past critical {critical}", "warn must be <= critical"
        )
    return Bound(warn=warn, critical=critical, mode=mode)


def _int_at_least_one(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}", "e.g. 20")
    return value


def _metric_threshold(name: str, table: Any, spec: MetricSpec, default_min: int) -> MetricThreshold:
    where = f"metrics.{name!r}"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table, got {table!r}", "write warn = ...")
    check_keys(table, _METRIC_KEYS, where)
    if "higher_is_better" in table and table["higher_is_better"] is not spec.higher_is_better:
        raise ConfigError(
            f"{where}.higher_is_better: {name} is "
            f"{'higher' if spec.higher_is_better else 'lower'}-is-better",
            "the direction is fixed by the metric; drop or correct the key",
        )
    bound = _bound(table, where, default_mode="absolute")
    min_samples = _int_at_least_one(table.get("min_samples", default_min), f"{where}.min_samples")
    raw_cats = table.get("categories", {})
    if not isinstance(raw_cats, Mapping):
        raise ConfigError(f"{where}.categories: expected a table", 'e.g. "category:math" = {...}')
    categories: dict[str, Bound] = {}
    for slice_name, cat in raw_cats.items():
        cwhere = f"{where}.categories.{slice_name!r}"
        if ":" not in slice_name:
            raise ConfigError(
                f"{cwhere}: slice names are 'kind:value'", 'e.g. "category:math", "length:long"'
            )
        if not isinstance(cat, Mapping):
            raise ConfigError(f"{cwhere}: expected a table", "write { warn = ..., critical = ... }")
        check_keys(cat, _BOUND_KEYS, cwhere)
        categories[slice_name] = _bound(cat, cwhere, default_mode=bound.mode)
    return MetricThreshold(metric=name, bound=bound, min_samples=min_samples, categories=categories)


def thresholds_digest(data: Mapping[str, Any]) -> str:
    """sha256 of a parsed ``thresholds.toml`` mapping, written as canonical JSON (keys sorted,
    no whitespace; a TOML date as its ISO text): independent of comments, layout and order."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_thresholds(
    data: Mapping[str, Any],
    *,
    source: str,
    specs: Mapping[str, MetricSpec] | None = None,
) -> Thresholds:
    """Validate a parsed ``thresholds.toml`` mapping against the metric registry.

    ``specs`` defaults to :func:`gate.metrics.registry.all_metrics`.
    """
    known = all_metrics() if specs is None else specs
    check_keys(data, _TOP_KEYS, source)
    gate_table = data.get("gate", {})
    if not isinstance(gate_table, Mapping):
        raise ConfigError(f"{source}: [gate] must be a table", "write [gate] then alpha = ...")
    check_keys(gate_table, _GATE_KEYS, "gate")
    alpha_raw = gate_table.get("alpha", DEFAULT_ALPHA)
    if isinstance(alpha_raw, bool) or not isinstance(alpha_raw, (int, float)):
        raise ConfigError(f"gate.alpha: expected a number, got {alpha_raw!r}", "e.g. 0.01")
    alpha = float(alpha_raw)
    if not 0.0 < alpha < 0.5:
        raise ConfigError(f"gate.alpha: {alpha} is outside (0, 0.5)", "the default is 0.01")
    min_samples = _int_at_least_one(
        gate_table.get("min_samples", DEFAULT_MIN_SAMPLES), "gate.min_samples"
    )
    exercised_only = gate_table.get("exercised_only", False)
    if not isinstance(exercised_only, bool):
        raise ConfigError(
            f"gate.exercised_only: expected true or false, got {exercised_only!r}",
            "write exercised_only = true to gate a partly exercised tier on its exercised items",
        )
    power = _power(gate_table.get("power", DEFAULT_POWER), alpha)
    require_power = gate_table.get("require_power", False)
    if not isinstance(require_power, bool):
        raise ConfigError(
            f"gate.require_power: expected true or false, got {require_power!r}",
            "write require_power = true to block on underpowered verdicts",
        )
    metrics_table = data.get("metrics", {})
    if not isinstance(metrics_table, Mapping):
        raise ConfigError(f"{source}: [metrics] must be a table", '[metrics."tier.name"]')
    metrics: dict[str, MetricThreshold] = {}
    for name, table in metrics_table.items():
        if name not in known:
            raise ConfigError(f"{source}: unknown metric {name!r}", suggest(name, list(known)))
        metrics[name] = _metric_threshold(name, table, known[name], min_samples)
    tiers_table = data.get("tiers", {})
    if not isinstance(tiers_table, Mapping):
        raise ConfigError(f"{source}: [tiers] must be a table", "[tiers.latency] ...")
    tiers: dict[str, Mapping[str, Any]] = {}
    for tier, settings in tiers_table.items():
        check_tier(tier, source)
        if not isinstance(settings, Mapping):
            raise ConfigError(f"tiers.{tier}: expected a table", f"[tiers.{tier}] then keys")
        tiers[tier] = dict(settings)
    calibration = data.get("calibration", {})
    if not isinstance(calibration, Mapping):
        raise ConfigError(f"{source}: [calibration] must be a table", "re-run gate calibrate")
    return Thresholds(
        alpha=alpha,
        min_samples=min_samples,
        metrics=metrics,
        source=source,
        tiers=tiers,
        exercised_only=exercised_only,
        # the [calibration] record says where the bounds came from, it decides nothing
        digest=thresholds_digest({k: v for k, v in data.items() if k != "calibration"}),
        power=power,
        require_power=require_power,
        calibration=dict(calibration),
    )


def _power(value: Any, alpha: float) -> float:
    """``gate.power``: a probability above ``alpha`` and below 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"gate.power: expected a number, got {value!r}", "e.g. 0.8")
    if not alpha < value < 1.0:
        raise ConfigError(
            f"gate.power: {value} is outside (alpha {alpha:g}, 1)", "the default is 0.8"
        )
    return float(value)


def packaged_thresholds_path() -> Path:
    """The default ``thresholds.toml`` shipped inside the package."""
    return Path(str(importlib.resources.files("gate") / "assets" / THRESHOLDS_FILE))


def load_thresholds(
    path: Path | None = None, *, specs: Mapping[str, MetricSpec] | None = None
) -> Thresholds:
    """Load and validate thresholds.

    ``path=None``: ``./thresholds.toml`` when present, else the packaged default.
    """
    if path is None:
        local = Path.cwd() / THRESHOLDS_FILE
        path = local if local.is_file() else packaged_thresholds_path()
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"thresholds file {path} not found", "pass an existing --thresholds file")
    return parse_thresholds(load_toml(path), source=str(path), specs=specs)


def unbounded_metrics(thresholds: Thresholds, names: Iterable[str]) -> tuple[str, ...]:
    """The metrics of ``names`` that ``thresholds`` sets no bound for (reported, not gated).

    Ratio metrics (``SampleKind.RATIO``) are gated by their tier's ``min_speedup``, not
    here: they count as bounded.
    """
    known = all_metrics()
    return tuple(
        name
        for name in dict.fromkeys(names)
        if thresholds.for_metric(name) is None
        and not (name in known and known[name].sample_kind is SampleKind.RATIO)
    )


def require_a_bound(thresholds: Thresholds, names: Iterable[str], *, what: str) -> None:
    """Refuse thresholds that bound none of ``names`` (the metrics ``what`` measures).

    An empty ``thresholds.toml`` (or one that only bounds other tiers' metrics)
    would approve any build: :class:`ConfigError`, exit 4. No names: nothing to refuse.
    """
    wanted = tuple(dict.fromkeys(names))
    if not wanted or len(unbounded_metrics(thresholds, wanted)) < len(wanted):
        return
    example = wanted[0]
    raise ConfigError(
        f"{thresholds.source} bounds none of the {len(wanted)} metrics {what} measures,"
        " so it would approve any build",
        f'bound them, e.g. [metrics."{example}"] warn = 0.02,'
        " or remove the file to use the packaged defaults",
    )
