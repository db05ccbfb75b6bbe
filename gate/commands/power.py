"""``gate power``: what a fixed-tolerance accuracy gate catches, beside gate's paired test.

The maths is :mod:`gate.gating.rule_power` (docs/power.md); this module reads
and checks the options, gets the flip rate (given, assumed, or counted in two
lm-eval samples files), prints the statement and the table, and writes
``--json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gate.commands.options import file_option, thresholds_option
from gate.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from gate.gating.rule_power import PairedTest, ToleranceRule

#: The flip rate assumed when none is given or measured (answers lost plus gained, over n).
ASSUMED_FLIP_RATE = 0.10


def _open_unit(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise UsageError(f"{name} {value:g} is outside (0, 1)", f"give {name} as a fraction")


def _drops(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(
            f"--drops {text!r} is not a list of numbers", "write e.g. --drops 0.01,0.02,0.05"
        ) from None
    if not values:
        raise UsageError("--drops is empty", "write e.g. --drops 0.01,0.02,0.05")
    return values


def check_inputs(
    rule: ToleranceRule, paired: PairedTest, drops: Sequence[float], power: float
) -> None:
    """One :class:`UsageError` (exit 4) for the first option out of range (``drops``: every
    drop asked about)."""
    n, baseline, tolerance, relative = rule.n, rule.baseline, rule.tolerance, rule.relative
    if n < 1:
        raise UsageError(f"--n {n} must be at least 1", "give the benchmark's item count")
    if rule.baseline_n is not None and rule.baseline_n < 1:
        raise UsageError(f"--baseline-n {rule.baseline_n} must be at least 1", "or leave it out")
    _open_unit("--baseline", baseline)
    if not (math.isfinite(tolerance) and tolerance > 0.0):
        raise UsageError(f"--tolerance {tolerance:g} must be > 0", "e.g. --tolerance 0.08")
    if relative and tolerance >= 1.0:
        raise UsageError(
            f"--tolerance {tolerance:g} is 100 % or more of the baseline: no score fails",
            "a relative tolerance is a fraction below 1",
        )
    if not relative and tolerance >= baseline:
        raise UsageError(
            f"--tolerance {tolerance:g} is not below the baseline {baseline:g}: no score fails",
            "give an absolute tolerance below the baseline, or --relative",
        )
    for d in drops:
        if not 0.0 < baseline - d < 1.0:
            raise UsageError(
                f"drop {d:g} puts the candidate's accuracy at {baseline - d:g}, outside (0, 1)",
                "give drops as fractions of accuracy smaller than the baseline",
            )
    flip_rate, alpha = paired.flip_rate, paired.alpha
    if not 0.0 < flip_rate <= 1.0:
        raise UsageError(f"--flip-rate {flip_rate:g} is outside (0, 1]", "e.g. --flip-rate 0.1")
    if not 0.0 < alpha < 0.5:
        raise UsageError(f"--alpha {alpha:g} is outside (0, 0.5)", "e.g. --alpha 0.01")
    if not alpha < power < 1.0:
        raise UsageError(f"--power {power:g} must lie in (alpha, 1)", "e.g. --power 0.8")


def _pct(p: float) -> str:
    """A probability for people: percent, ``> 99.99 %`` short of 1, scientific when tiny."""
    if 0.9999 < p < 1.0:
        return "> 99.99 %"
    if p == 0.0 or p >= 1e-4:
        return f"{p * 100:.2f} %"
    return f"{p:.1e}"


def _points(d: float | None) -> str:
    return "none below the baseline" if d is None else f"{d * 100:.2f} points"


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


@click.command("power")
@click.option(
    "--n", "n", type=int, default=None, help="Items in the benchmark (e.g. 1319; or --samples)."
)
@click.option(
    "--baseline", type=float, default=None, help="Expected baseline accuracy (0-1; or --samples)."
)
@click.option("--tolerance", type=float, required=True, help="The rule's tolerance (e.g. 0.08).")
@click.option("--relative", is_flag=True, help="The tolerance is a fraction of the baseline.")
@click.option(
    "--two-sided", is_flag=True, help="The rule also fails a score above baseline + tolerance."
)
@click.option(
    "--baseline-n",
    type=int,
    default=None,
    help="Items the baseline accuracy was itself measured on (it is then a noisy number).",
)
@click.option(
    "--drop", type=float, default=0.05, show_default=True, help="The true drop to assess."
)
@click.option(
    "--drops",
    "drops_text",
    default=",".join(f"{k / 100:g}" for k in range(1, 11)),
    show_default=True,
    help="Drops of the table, comma-separated fractions.",
)
@click.option(
    "--flip-rate",
    type=float,
    default=None,
    help=f"Share of items whose correctness differs (lost + gained; default {ASSUMED_FLIP_RATE}, assumed).",
)
@click.option(
    "--samples",
    nargs=2,
    type=click.Path(path_type=Path),
    default=None,
    help="Two lm-eval --log_samples files (or dirs), BASE CAND: the flip rate counted in them.",
)
@click.option("--filter", "filter_name", default=None, help="lm-eval filter for --samples.")
@click.option("--alpha", type=float, default=None, help="McNemar's level (default: thresholds).")
@click.option(
    "--power", "target", type=float, default=None, help="Target power (default: thresholds)."
)
@thresholds_option
@file_option("--json", "json_out", help="Also write the figures and the table as JSON here.")
def power(
    n: int | None,
    baseline: float | None,
    tolerance: float,
    relative: bool,
    two_sided: bool,
    baseline_n: int | None,
    drop: float,
    drops_text: str,
    flip_rate: float | None,
    samples: tuple[Path, Path] | None,
    filter_name: str | None,
    alpha: float | None,
    target: float | None,
    thresholds: Path | None,
    json_out: Path | None,
) -> int:
    """What a fixed-tolerance accuracy rule catches, and what gate's paired test would.

    The rule passes a candidate whose accuracy on N items is at least
    BASELINE - TOLERANCE (--relative: BASELINE x (1 - TOLERANCE); a score on the
    bound passes). For a true drop it prints the probability that the rule
    fails the candidate (exact binomial) and its false-alarm rate when nothing
    changed; with --baseline-n the baseline is itself a measurement and the
    bound moves with it (summed exactly over its binomial).

    Beside it, McNemar's one-sided test on the same items (gate's paired test,
    at thresholds.toml's alpha): its detection probability and the items it
    needs for the target power, given the flip rate (answers lost + gained,
    over N) from --flip-rate, from two lm-eval samples files (--samples), or
    assumed (0.10). A table over drops (default 1 to 10 points) follows.

    Exit 0; 4 for an option out of range.

    \b
    Examples:
      gate power --n 1319 --baseline 0.78 --tolerance 0.08 --drop 0.05 --json p.json
      gate power --n 1319 --baseline 0.78 --tolerance 0.08 --baseline-n 1319
      gate power --tolerance 0.08 --samples base/samples_gsm8k_*.jsonl cand/samples_gsm8k_*.jsonl
    """
    from gate.gating.rule_power import PairedTest, ToleranceRule
    from gate.gating.thresholds import load_thresholds
    from gate.store.writable import check_writable

    if json_out is not None:
        check_writable(json_out, "--json")
    limits = load_thresholds(thresholds)
    alpha = limits.alpha if alpha is None else alpha
    target = limits.power if target is None else target
    source = "--flip-rate" if flip_rate is not None else "assumed"
    counted = _counted(samples, filter_name, flip_rate)
    if counted is not None:
        flip_rate, source = counted["flip_rate"], "samples"
        n = counted["n"] if n is None else n
        baseline = counted["baseline"] if baseline is None else baseline
    if n is None or baseline is None:
        raise UsageError("--n and --baseline are required", "or give --samples BASE CAND")
    rate = ASSUMED_FLIP_RATE if flip_rate is None else flip_rate
    drops = _drops(drops_text)
    rule = ToleranceRule(n, baseline, tolerance, relative, two_sided, baseline_n)
    paired = PairedTest(n, rate, alpha)
    check_inputs(rule, paired, (drop, *drops), target)
    doc = _document(rule, paired, drops, drop=drop, power=target, source=source, counted=counted)
    _print(doc)
    if json_out is not None:
        _write_json(json_out, doc)
    return int(ExitCode.OK)


def _counted(
    samples: tuple[Path, Path] | None, filter_name: str | None, flip_rate: float | None
) -> dict[str, Any] | None:
    """The flips counted in two lm-eval samples files (``None``: no ``--samples``); with
    ``--flip-rate`` too, or no flip at all, a :class:`UsageError`."""
    if samples is None:
        return None
    if flip_rate is not None:
        raise UsageError("--flip-rate and --samples both given", "give one of them")
    counted = _count_flips(samples, filter_name)
    if counted["flip_rate"] == 0.0:
        raise UsageError(
            f"the samples show no flips in {counted['n']} documents",
            "give --flip-rate for the build you expect",
        )
    return counted


def _document(
    rule: ToleranceRule,
    paired: PairedTest,
    drops: Sequence[float],
    *,
    drop: float,
    power: float,
    source: str,
    counted: dict[str, Any] | None,
) -> dict[str, Any]:
    """The ``gate.power`` document: the rule's figures, the paired test's and the table over
    ``drops`` (what is printed, and written with ``--json``)."""
    from gate.gating.rule_power import exact, power_table

    rows = power_table(rule, paired, drops, power=power)
    k_lo, k_hi = rule.fail_counts(exact(rule.baseline))
    return {
        "kind": "gate.power",
        "rule": {
            "n": rule.n,
            "baseline": rule.baseline,
            "tolerance": rule.tolerance,
            "mode": "relative" if rule.relative else "absolute",
            "sided": "two" if rule.two_sided else "one",
            "baseline_n": rule.baseline_n,
            "baseline_noise": "exact" if rule.baseline_n is None else "binomial",
            "fails_at_or_below": k_lo,
            "fails_at_or_above": k_hi,
            "drop": drop,
            "detection": rule.detection(drop),
            "false_alarm": rule.false_alarm,
            "mde": rule.mde(power),
        },
        "paired": {
            "test": "mcnemar",
            "alpha": paired.alpha,
            "power": power,
            "flip_rate": paired.flip_rate,
            "flip_rate_source": source,
            "counted": counted,
            "drop": drop,
            "detection": paired.detection(drop),
            "false_alarm": paired.detection(0.0),
            "n_needed": paired.n_needed(drop, power),
            "mde": _finite(paired.mde(power)),
        },
        "table": [
            {
                "drop": r.drop,
                "rule_detection": r.rule_detection,
                "paired_detection": r.paired_detection,
                "paired_n_needed": r.paired_n_needed,
            }
            for r in rows
        ],
    }


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``--json`` ``path`` (atomically; an OS error is one line, exit 4)."""
    from gate.store.atomic import write_atomic
    from gate.store.writable import writing

    with writing("--json", path):
        write_atomic(path, (json.dumps(doc, indent=2) + "\n").encode())


def _count_flips(samples: tuple[Path, Path], filter_name: str | None) -> dict[str, Any]:
    """n, baseline accuracy and flip rate of two lm-eval runs (their 0/1 metric)."""
    from gate.data.lmeval_runs import import_lmeval

    imported = import_lmeval(samples[0], samples[1], filter_name=filter_name)
    counted = [t for t in imported.tasks if t.metric is not None]
    if not counted:
        raise UsageError("the samples carry no 0/1 metric to count flips on", "give --flip-rate")
    n = sum(t.n for t in counted)
    lost = sum(t.lost for t in counted)
    gained = sum(t.gained for t in counted)
    return {
        "n": n,
        "lost": lost,
        "gained": gained,
        "baseline": sum(t.base_correct for t in counted) / n,
        "flip_rate": (lost + gained) / n,
        "tasks": [t.task for t in counted],
    }


def _print(doc: dict[str, Any]) -> None:
    rule, paired = doc["rule"], doc["paired"]
    n, base, tol = rule["n"], rule["baseline"], rule["tolerance"]
    bound = f"{base:g} x (1 - {tol:g})" if rule["mode"] == "relative" else f"{base:g} - {tol:g}"
    sides = (
        f"within {bound.replace(' - ', ' +/- ', 1)}" if rule["sided"] == "two" else f">= {bound}"
    )
    echo = click.echo
    echo(f"Fixed-tolerance rule: passes when accuracy {sides}, on n = {n} items")
    fails = f"  fails at {rule['fails_at_or_below']} correct answers or fewer"
    if rule["fails_at_or_above"] is not None:
        fails += f", or {rule['fails_at_or_above']} or more"
    if rule["baseline_noise"] == "exact":
        echo(fails + " (exact binomial; the baseline taken as an exact number)")
    else:
        echo(
            f"  the baseline is itself measured on {rule['baseline_n']} items: the bound moves "
            "with it (exact sum over its binomial, runs independent)"
        )
    d = rule["drop"] * 100
    echo(f"  catches a true {d:g}-point drop: {_pct(rule['detection'])}")
    echo(f"  false alarms when nothing changed: {_pct(rule['false_alarm'])}")
    echo(f"  {paired['power']:.0%} detection needs a drop of {_points(rule['mde'])}")
    origin = {
        "assumed": "assumed; measure it with --samples BASE CAND or set --flip-rate",
        "--flip-rate": "--flip-rate",
        "samples": "counted in the samples files",
    }[paired["flip_rate_source"]]
    echo(
        f"Paired test (McNemar, one-sided, alpha {paired['alpha']:g}), flip rate "
        f"{paired['flip_rate']:.4g} ({origin}):"
    )
    if paired["counted"] is not None:
        c = paired["counted"]
        echo(f"  {c['n']} documents, {c['lost']} answers lost, {c['gained']} gained")
    echo(f"  catches a true {d:g}-point drop: {_pct(paired['detection'])}")
    echo(f"  false alarms when nothing changed: {_pct(paired['false_alarm'])}")
    needed = paired["n_needed"]
    echo(
        f"  items needed for {paired['power']:.0%}: "
        + (f"{needed}" if needed is not None else "more than a million")
    )
    echo(f"  {paired['power']:.0%} detection needs a drop of {_points(paired['mde'])}")
    echo("")
    echo(
        f"{'drop':>6}  {'rule':>9}  {'paired':>9}  {'paired n for ' + format(paired['power'], '.0%'):>18}"
    )
    for row in doc["table"]:
        need = row["paired_n_needed"]
        echo(
            f"{row['drop'] * 100:>5.3g}%  {_pct(row['rule_detection']):>9}  "
            f"{_pct(row['paired_detection']):>9}  {need if need is not None else '-':>18}"
        )
