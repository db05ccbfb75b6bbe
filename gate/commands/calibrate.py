"""``gate calibrate``: measure a model's noise floor here and write thresholds derived from it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gate.commands.options import (
    F,
    collect_load,
    collect_options,
    engine_settings,
    file_option,
    json_option,
    load_options,
    session_option,
    thresholds_option,
)
from gate.errors import ConfigError, ExitCode
from gate.models.load_settings import LoadSettings
from gate.tiers.tier_spec import CALIBRATED_TIERS, DEFAULT_CALIBRATION_TIERS

if TYPE_CHECKING:
    from gate.session.run_config import RunConfig
    from gate.workflows.calibrate import CalibrationRequest, CheckedCalibration


def _sizes(text: str | None) -> tuple[int, ...] | None:
    if text is None or not text.strip():
        return None
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(
            f"--batch-sizes {text!r} is not a list of integers", "e.g. 4,32"
        ) from None
    if not sizes or min(sizes) < 1:
        raise ConfigError(f"--batch-sizes {text!r}: sizes must be >= 1", "e.g. 4,32")
    return sizes


def _shown(name: str, kind: Any, default: float, text: str) -> Callable[[F], F]:
    """An option of type ``kind`` whose ``default`` ``--help`` shows."""
    return click.option(name, type=kind, default=default, show_default=True, help=text)


def calibration_request(
    *,
    out: Path,
    log: Path | None,
    config: Path | None,
    tiers: str,
    batch_sizes: str | None,
    load: LoadSettings,
    **given: Any,
) -> CalibrationRequest:
    """The calibration ``gate calibrate``'s command line asks for, typed once: the run config
    parsed once, the tiers and batch sizes read, the load settings over ``[run]``'s and the
    sessions' log beside ``out`` unless ``--log`` names one."""
    from gate.session.run_config import load_run_config
    from gate.session.runner import parse_tiers
    from gate.workflows.calibrate import CalibrationRequest

    run_config = load_run_config(config) if config is not None else None  # parsed once
    return CalibrationRequest(
        tiers=parse_tiers(tiers) or DEFAULT_CALIBRATION_TIERS,
        batch_sizes=_sizes(batch_sizes),
        config=run_config,
        load=_load_settings(load, run_config),
        log=log if log is not None else out.with_name(out.name + ".log"),
        **given,
    )


#: The parameters :func:`calibration_request` collects (``out`` is also the command's).
_REQUEST_PARAMS = (
    "model",
    "recipe",
    "tiers",
    "log",
    "repeats",
    "batch_sizes",
    "order_seeds",
    "tail_seeds",
    "dtype_control",
    "config",
    "thresholds",
    "model_slug",
    "margin",
    "quantile",
    "power",
    "allow_pickle",
    "load",
    "engine",
)


@click.command("calibrate")
@collect_load
@collect_options("engine", ("serve", "endpoint", "served_model", "api_key_env"), engine_settings)
@collect_options("request", _REQUEST_PARAMS, calibration_request, keep=("out",))
@click.option("--model", required=True, help="Model id, local directory, .gguf file, or 'demo'.")
@session_option(
    "recipe",
    help="The build calibrated, recorded and re-run with this recipe or stack (default: none;"
    " the speculative tier needs a spec-* part).",
)
@click.option(
    "--tiers",
    default=",".join(DEFAULT_CALIBRATION_TIERS),
    show_default=True,
    help=f"Comma-separated tiers to calibrate ({', '.join(CALIBRATED_TIERS)}).",
)
@file_option("--out", required=True, help="Write the calibrated thresholds.toml here.")
@json_option
@file_option("--log", help="Where the calibration sessions' own reports go (default: <out>.log).")
@_shown("--repeats", click.IntRange(min=1), 3, "Reruns of the unchanged build per tier.")
@click.option(
    "--batch-sizes",
    metavar="N,N",
    help="Batch sizes to rerun with (default: each tier's own halved and doubled).",
)
@_shown(
    "--order-seeds",
    click.IntRange(min=0),
    1,
    "Fidelity: reruns with the prompts grouped in a seeded random order.",
)
@_shown(
    "--tail-seeds",
    click.IntRange(min=0),
    1,
    "Fidelity: reference packs re-recorded with other tail-sample seeds.",
)
@click.option(
    "--dtype-control",
    type=click.Choice(["float32", "bfloat16", "float16"]),
    help="Also gate the model loaded in this dtype (a named control; counts as noise).",
)
@click.option(
    "--serve",
    metavar="CMD",
    help="Engine control: start this server command and gate what it serves (counts as noise).",
)
@click.option("--endpoint", metavar="URL", help="Engine control: a running server's /v1 URL.")
@click.option("--served-model", help="The model name the server serves (default: its only one).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@session_option("config", help="Run config whose [tiers.<name>] settings the runs use.")
@thresholds_option
@session_option("model_slug", help="Store slug of the temporary baselines (default: the model's).")
@_shown("--margin", float, 2.0, "warn = max(declared warn, MARGIN x the noise quantile).")
@_shown(
    "--quantile", float, 0.95, "Quantile of the noise degradations (the higher order statistic)."
)
@click.option(
    "--power",
    type=float,
    help="Power of the MDE and of the sample sizes (default: [gate] power of --thresholds).",
)
@session_option("allow_pickle", help="Load a pickle-only checkpoint (trusted only).")
@load_options
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check every input, print the sessions that would run and exit 0; loads nothing.",
)
def calibrate(request: CalibrationRequest, out: Path, json_out: Path | None, dry_run: bool) -> int:
    """Measure the noise floor of MODEL on this machine and write thresholds derived from it.

    Records the model into a temporary store (your baseline store is never
    written), then gates the unchanged build against itself under changes that
    leave the model as it is: --repeats reruns, other batch sizes, another
    prompt order and reference packs with other tail-sample seeds; and, when
    named, controls you accept as "no regression": --dtype-control (the model
    in another dtype) and --serve/--endpoint (the same weights behind a
    serving engine). Per metric: the degradation each run showed, the bound
    derived from it, warn = max(declared warn, MARGIN x noise quantile) and
    critical = max(declared critical, warn x the declared ratio), where the
    declared bounds are those of --thresholds; the smallest degradation the
    gate's test detects at the configured item count (MDE) and the items it
    needs to detect the critical bound. Writes OUT (a thresholds.toml with a
    comment per metric and a [calibration] record that `gate run --dry-run`
    reads to plan sample sizes) and prints a short report.

    Exit codes: 0 written; 2 interrupted; 3 a session failed (model load,
    server); 4 bad input (tier, thresholds, config, unwritable --out).

    \b
    Examples:
      gate calibrate --model demo --tiers fidelity --repeats 2 --out cal.toml
      gate calibrate --model ./llama-8b --config gate.toml --dtype-control bfloat16 --out cal.toml
      gate calibrate --model demo --endpoint http://127.0.0.1:8000/v1 --out cal.toml
      gate run --config gate.toml --thresholds cal.toml --dry-run   # the sample-size plan
    """
    from gate.store.writable import check_writable
    from gate.workflows.calibrate import check_calibration

    checked = check_calibration(request)
    check_writable(out, "--out")
    assert request.log is not None  # calibration_request names one
    check_writable(request.log, "--log")
    if json_out is not None:
        check_writable(json_out, "--json")
    if dry_run:
        for line in _dry_run_lines(checked, out):
            click.echo(line)
        return int(ExitCode.OK)
    _calibrate(checked, out, json_out)
    return int(ExitCode.OK)


def _dry_run_lines(checked: CheckedCalibration, out: Path) -> list[str]:
    """What ``--dry-run`` prints: the sessions that would run and what they would write."""
    request = checked.request
    lines = [
        f"gate calibrate --dry-run: {request.model}, tiers {', '.join(request.tiers)}; "
        "nothing was loaded or measured",
        f"  declared bounds: {checked.thresholds.source}",
        f"  settings: {json.dumps(dict(checked.tables))}",
    ]
    lines += [f"  record {ref}: fidelity with tail_seed {seed}" for ref, seed in checked.tail_refs]
    for pert in checked.perturbations:
        extra = f" {json.dumps(dict(pert.overrides))}" if pert.overrides else ""
        kind = " (control)" if pert.control else ""
        lines.append(f"  run {pert.source}{kind}: {', '.join(pert.tiers)}{extra}")
    lines.append(f"  {checked.sessions} sessions; writes {out}, log {request.log}")
    lines.append("gate: dry run OK (exit 0)")
    return lines


def _calibrate(checked: CheckedCalibration, out: Path, json_out: Path | None) -> None:
    """Run the calibration of ``checked``, write the thresholds to ``out`` (and the JSON
    document to ``json_out``) and print the report and the sample-size plan."""
    from gate.gating.calibration.plan import describe_plans, plan_sample_sizes
    from gate.gating.calibration.reader import read_calibration
    from gate.gating.calibration.writer import render_thresholds
    from gate.gating.thresholds import load_thresholds
    from gate.metrics.registry import all_metrics
    from gate.report.calibration import calibration_document, calibration_lines
    from gate.store.atomic import write_atomic
    from gate.store.writable import writing
    from gate.workflows.calibrate import run_calibration

    request = checked.request
    log_path = request.log
    assert log_path is not None  # calibration_request names one
    with writing("--log", log_path):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("", encoding="utf-8")
    result = run_calibration(checked)
    specs = all_metrics()
    text = render_thresholds(checked.thresholds, result.record, specs)
    with writing("--out", out):
        write_atomic(out, text.encode("utf-8"))
    written = load_thresholds(out)  # what gate run will read, checked
    for line in calibration_lines(request.model, result.record, result.session_codes):
        click.echo(line)
    calibration = read_calibration(written.calibration, str(out))
    plans = plan_sample_sizes(written, calibration, specs, request.tiers)
    for line in describe_plans(plans, calibration):
        click.echo(line)
    if json_out is not None:
        doc = calibration_document(request.model, str(out), result.record, result.session_codes)
        with writing("--json", json_out):
            write_atomic(json_out, (json.dumps(doc, indent=2) + "\n").encode())
    click.echo(f"gate: wrote {out} (sessions' reports: {log_path})")


def _load_settings(given: LoadSettings, config: RunConfig | None) -> LoadSettings:
    """The command line's device, dtype and trust over the ``[run]`` keys of ``--config``
    (the one override rule, :func:`gate.session.run_config.command_line_over`)."""
    from gate.session.run_config import CandidateOverrides, RunDefaults, command_line_over

    defaults = config.run if config is not None else RunDefaults()
    return command_line_over(CandidateOverrides(load=given), defaults).load
