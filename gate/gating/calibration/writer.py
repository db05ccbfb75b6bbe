"""The calibrated ``thresholds.toml``: the derived bounds with a comment per metric
(its noise, spread, MDE and the items it needs) and the ``[calibration]`` record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gate.gating.calibration.bounds import MetricCalibration
from gate.gating.calibration.record import CALIBRATION_KEY, CalibrationRecord
from gate.gating.thresholds import Thresholds
from gate.gating.verdict import Bound
from gate.metrics.metric_spec import MetricSpec


def _fmt(value: Any) -> str:
    """A TOML value: numbers (``inf``/``nan`` as TOML spells them), strings, lists, tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        import json

        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_fmt(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else _fmt(key)


def _g(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "none detectable"
    return f"{value:.3g}"


def _metric_comment(cal: MetricCalibration, declared_source: str) -> list[str]:
    where = ", ".join(f"{s} {_g(d)}" for s, d in cal.noise_sources.items()) or "no runs"
    lines = [f"# noise (degradation per source): {where}"]
    if cal.rule == "noise":
        lines.append(
            f"# warn = margin x noise quantile {_g(cal.noise)} (above the declared "
            f"{_g(cal.declared.warn if cal.declared else None)} of {declared_source}); "
            "critical keeps the declared warn:critical ratio"
        )
    else:
        lines.append(
            f"# bounds as declared in {declared_source}: margin x noise quantile "
            f"{_g(cal.noise)} is below the declared warn"
        )
    if cal.mde is not None:
        need = "more than the search limit" if cal.needed_n is None else str(cal.needed_n)
        lines.append(
            f"# {cal.test}: per-item spread {_g(cal.spread)}; n = {cal.n} detects "
            f"{_g(cal.mde)}; {need} items detect the critical bound"
        )
    else:
        lines.append("# a point value: judged on the value alone (no test, no MDE)")
    return lines


def render_thresholds(
    declared: Thresholds, record: CalibrationRecord, specs: Mapping[str, MetricSpec]
) -> str:
    """The calibrated ``thresholds.toml``: ``declared`` with the calibrated bounds in place,
    every other section kept, a comment per metric and the ``[calibration]`` record.

    Loadable by :func:`gate.gating.thresholds.load_thresholds` (the record included).
    """
    lines = [
        f"# thresholds.toml calibrated by `gate calibrate` for {record.model} on {record.created}",
        f"# hardware: {record.hardware}",
        f"# declared tolerances: {declared.source}; noise sources: {', '.join(record.sources)}",
        f"# rule: warn = max(declared warn, {record.margin:g} x the {record.quantile:g} quantile"
        " of the noise degradations); critical = max(declared critical, warn x declared ratio)",
        "",
        "[gate]",
        f"alpha = {_fmt(declared.alpha)}",
        f"min_samples = {declared.min_samples}",
        f"exercised_only = {_fmt(declared.exercised_only)}",
        f"power = {_fmt(declared.power)}",
        f"require_power = {_fmt(declared.require_power)}",
    ]
    for name, threshold in declared.metrics.items():
        spec = specs[name]
        cal = record.metrics.get(name)
        lines += ["", f'[metrics."{name}"]']
        if cal is not None:
            lines += _metric_comment(cal, declared.source)
        else:
            lines.append(f"# not calibrated: as declared in {declared.source}")
        bound = threshold.bound
        if cal is not None and cal.warn is not None and cal.critical is not None:
            bound = Bound(warn=cal.warn, critical=cal.critical, mode=bound.mode)
        lines.append(f"higher_is_better = {_fmt(spec.higher_is_better)}")
        lines.append(f"mode = {_fmt(bound.mode)}")
        lines.append(f"warn = {_fmt(bound.warn)}")
        lines.append(f"critical = {_fmt(bound.critical)}")
        if threshold.min_samples != declared.min_samples:
            lines.append(f"min_samples = {threshold.min_samples}")
        if threshold.categories:
            cats = {
                k: {"warn": b.warn, "critical": b.critical, "mode": b.mode}
                for k, b in threshold.categories.items()
            }
            lines.append(f"categories = {_fmt(cats)}")
    for tier, table in declared.tiers.items():
        lines += ["", f"[tiers.{tier}]"]
        lines += [f"{_key(k)} = {_fmt(v)}" for k, v in table.items()]
    lines += ["", *_record_lines(record)]
    return "\n".join(lines) + "\n"


def _record_lines(record: CalibrationRecord) -> list[str]:
    lines = [
        "# What `gate calibrate` measured: read back by `gate run --dry-run` to plan sample sizes.",
        f"[{CALIBRATION_KEY}]",
        f"model = {_fmt(record.model)}",
        f"created = {_fmt(record.created)}",
        f"hardware = {_fmt(record.hardware)}",
        f"alpha = {_fmt(record.alpha)}",
        f"power = {_fmt(record.power)}",
        f"margin = {_fmt(record.margin)}",
        f"quantile = {_fmt(record.quantile)}",
        f"sources = {_fmt(list(record.sources))}",
    ]
    for tier, timing in record.timings.items():
        lines += [
            "",
            f"[{CALIBRATION_KEY}.timings.{tier}]",
            f"seconds = {_fmt(timing.seconds)}",
            f"items = {timing.items}",
        ]
    for name, cal in record.metrics.items():
        lines += ["", f'[{CALIBRATION_KEY}.metrics."{name}"]', f"test = {_fmt(cal.test)}"]
        lines.append(f"n = {cal.n}")
        if cal.spread is not None:
            lines.append(f"spread = {_fmt(cal.spread)}")
        lines.append(f"noise = {_fmt(cal.noise)}")
        lines.append(f"rule = {_fmt(cal.rule)}")
        if cal.mde is not None:
            lines.append(f"mde = {_fmt(cal.mde)}")
        if cal.needed_n is not None:
            lines.append(f"needed_n = {cal.needed_n}")
        sources = {s: d for s, d in cal.noise_sources.items()}
        lines.append(f"sources = {_fmt(sources)}")
    return lines
