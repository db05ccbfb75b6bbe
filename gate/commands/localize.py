"""``gate localize``: which layers of a blocked build carry its loss, and the repaired build."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gate import progress
from gate.commands.options import (
    explicit_store,
    file_option,
    json_option,
    load_options,
    load_settings,
    session_option,
    store_option,
    thresholds_option,
)
from gate.errors import ConfigError, ExitCode, GateError, exit_meaning
from gate.localize.request import DEFAULT_RESOLVE, LocalizeOutputs, LocalizeRequest
from gate.metrics.catalog import fidelity as fidelity_catalog

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gate.models.stack import RecipeStack
    from gate.session.run_config import RunConfig
    from gate.workflows.plan import RunPlan


def _echo_err(line: str) -> None:
    click.echo(line, err=True)


def check_localizable(recipe: str | None) -> None:
    """Refuse a recipe whose build localize cannot swap layers of (one line, exit 4); a
    stack is localized on its weight part."""
    from gate.models.methods.registry import get_method
    from gate.models.stack import parse_stack

    stack = parse_stack(recipe)
    parsed = stack.weights if stack.part("weights") is not None else stack.parts[0]
    if not get_method(parsed.name).localizable:
        raise ConfigError(
            f"gate localize swaps decoder layers of a weight-compressed build; {parsed} is not one",
            "localize a weight recipe (bnb-*, quanto-*, prune-*) or a checkpoint (a model "
            "directory of the baseline's architecture, --recipe none); "
            "attention and KV recipes take layers= to choose layers by hand",
        )


def _fidelity_plan(
    request: LocalizeRequest, recipe: str | None, config: RunConfig | Path | None
) -> RunPlan:
    """``gate run``'s plan for ``request.candidate`` built with ``recipe`` on ``--tiers
    fidelity``: the one plan both the localized build and its repair are checked and gated
    with (same baseline ref, store slug, store, thresholds and run config)."""
    from gate.report.outputs import ReportTargets
    from gate.session.options import SessionOptions
    from gate.session.run_config import CandidateOverrides
    from gate.workflows.plan import plan_run

    overrides = CandidateOverrides(
        candidate=request.candidate,
        recipe=recipe,
        against=(request.against,) if request.against else (),
        tiers=("fidelity",),
        model_slug=request.model_slug,
        load=request.load,
    )
    options = SessionOptions(store=request.store, thresholds=request.thresholds)
    return plan_run(config, overrides, options, ReportTargets())


def _gate_repaired(request: LocalizeRequest, recipe: str, config: RunConfig | Path | None) -> Any:
    """Gate ``recipe`` with ``gate run``'s own plan and session (``--tiers fidelity``), under
    the same run config, baseline and slug as the localized build (:func:`_fidelity_plan`)."""
    from gate.localize.result import Gated
    from gate.report.console import make_console
    from gate.session import handoff
    from gate.workflows.multirun import execute_plan
    from gate.workflows.plan import check_plan

    plan = _fidelity_plan(request, recipe, config)
    checked = check_plan(plan)
    with handoff.collect() as collected:
        code = execute_plan(plan, checked, make_console())
    values: dict[str, float | None] = {fidelity_catalog.CGA: None, fidelity_catalog.KL_MEAN: None}
    verdict = exit_meaning(int(code))
    if collected:
        for v in collected[-1].verdicts:
            if v.slice is None and v.metric in values:
                values[v.metric] = v.value
    return Gated(verdict, int(code), values[fidelity_catalog.CGA], values[fidelity_catalog.KL_MEAN])


def run_localize(request: LocalizeRequest, run_config: RunConfig | None = None) -> int:
    """The whole command (also run by ``gate run --localize`` on a blocked build)."""
    from gate.models.stack import parse_stack
    from gate.workflows.plan import check_plan

    candidate, recipe = request.candidate, request.recipe
    check_localizable(recipe)
    request.outputs.check()
    # a run config gate run already parsed is used as it is (gate.toml read once per run)
    config = run_config if run_config is not None else request.config
    plan = _fidelity_plan(request, recipe, config)
    (checked,) = check_plan(plan)
    inputs = checked.inputs
    ((ref, baseline),) = inputs.baselines.items()
    pack_path = baseline.artifact_path("reference")
    same_model = baseline.provenance.source in (candidate, None)
    if same_model and str(parse_stack(recipe)) == (baseline.provenance.recipe or "none"):
        raise ConfigError(
            f"the candidate {candidate} ({parse_stack(recipe)}) is the baseline build itself",
            "name the compressed build: --recipe RECIPE, or a checkpoint directory as --candidate",
        )
    load = checked.candidate.load  # the command line's over the run config's
    if request.dry_run:
        click.echo(
            f"gate localize: {candidate} ({recipe or 'none'}) against {baseline.display}:"
            f" reference pack {pack_path.name}, thresholds {inputs.thresholds.source};"
            f" device {load.effective_device}, dtype {load.dtype or 'auto'}"
        )
        return int(ExitCode.OK)
    # the baseline ref, store and load settings as the plan resolved them, for the repaired
    # build's gate run
    resolved = replace(request, against=ref, store=inputs.options.store, load=load)
    return _localize(
        resolved,
        calibration=checked.candidate.calibration,
        baseline=baseline,
        bounds_source=inputs.thresholds,
        config=config,
    )


def _localize(
    request: LocalizeRequest,
    *,
    calibration: Path | None,
    baseline: Any,
    bounds_source: Any,
    config: RunConfig | Path | None,
) -> int:
    from gate.data.activation_prompts import activation_prompts_for
    from gate.localize.locate import SIGNAL_METRICS, LocalizeSettings, localize
    from gate.models.backends.loading import load_backend
    from gate.models.stack import parse_stack
    from gate.report.console import make_console
    from gate.report.localize import console_table, localization_summary_lines
    from gate.store.reference import load_pack

    started = time.perf_counter()
    bounds = _signal_bounds(bounds_source, SIGNAL_METRICS)
    candidate = request.candidate
    stack = parse_stack(request.recipe)
    parsed = stack.weights  # a stack is localized on its weight part
    if stack.composed:
        progress.note(
            f"localize: {stack} is localized on its weight part {parsed}; the repaired build"
            " keeps the other parts"
        )
    provenance = baseline.provenance
    base_source = provenance.source or candidate
    base_recipe = provenance.recipe or "none"
    with progress.task(f"localize: loading the baseline build {base_source} ({base_recipe})"):
        base = load_backend(request.load.spec(base_source), base_recipe)
    with progress.task(f"localize: loading the candidate {candidate} ({parsed})"):
        cand = load_backend(
            request.load.spec(candidate),
            parsed,
            calibration=activation_prompts_for(str(parsed), calibration),
        )
    pack = load_pack(baseline.artifact_path("reference"))
    result = localize(
        base.model,
        cand.model,
        pack,
        bounds=bounds,
        recipe=parsed,
        candidate={"model": candidate, "recipe": str(parsed)},
        baseline=baseline.display,
        settings=LocalizeSettings(resolve=request.resolve, limit=request.limit),
    )
    del base, cand
    result = _repair_as_stack(result, stack)
    repair = result.repair
    if request.gate_repair and repair is not None and repair.recipe not in (None, "none"):
        assert repair.recipe is not None
        progress.note(f"localize: gating the repaired build {repair.recipe} (--tiers fidelity)")
        gated = _gate_repaired(request, repair.recipe, config)
        result = replace(result, repair=replace(repair, gated=gated))
    total = time.perf_counter() - started
    result = replace(result, notes=(*result.notes, f"total wall time {total:.1f} s"))
    console = make_console()
    console.print(console_table(result))
    for line in localization_summary_lines(result):
        console.print(line, highlight=False, soft_wrap=True)
    console.print(f"total: {total:.1f} s (model loads and the repaired build's gate run included)")
    _write_outputs(result, request.outputs)
    sys.stdout.flush()
    return int(ExitCode.OK)


def _signal_bounds(
    bounds_source: Any, signal_metrics: Mapping[str, str]
) -> dict[str, dict[str | None, float]]:
    """Each localize signal's critical bound, whole (key ``None``) and per category, from
    the thresholds of the metric it stands for."""
    bounds: dict[str, dict[str | None, float]] = {}
    for signal, metric in signal_metrics.items():
        threshold = bounds_source.for_metric(metric)
        if threshold is not None:
            bounds[signal] = {None: threshold.bound.critical}
            bounds[signal].update({k: b.critical for k, b in threshold.categories.items()})
    return bounds


def _repair_as_stack(result: Any, stack: RecipeStack) -> Any:
    """A stack's repair: the repaired weight part with the stack's other parts kept."""
    from gate.models.recipes import Recipe

    repair = result.repair
    if not stack.composed or repair is None or repair.recipe in (None, "none"):
        return result
    whole = stack.with_weights(Recipe.parse(repair.recipe))
    return replace(result, repair=replace(repair, recipe=str(whole)))


def _write_outputs(result: Any, outputs: Any) -> None:
    """The localize JSON, HTML report and sensitivity plot that ``outputs`` asks for."""
    from gate.report.localize import html_page, png_bytes
    from gate.store.atomic import write_atomic
    from gate.store.writable import writing

    if outputs.json is not None:
        with writing("the localize JSON", outputs.json):
            document = json.dumps(result.to_document(), indent=2) + "\n"
            write_atomic(outputs.json, document.encode())
    if outputs.html is not None:
        with writing("the localize HTML report", outputs.html):
            write_atomic(outputs.html, html_page(result).encode())
    if outputs.png is not None:
        with writing("the sensitivity plot", outputs.png):
            write_atomic(outputs.png, png_bytes(result))


def localize_blocked(plan: Any, json_out: Path | None) -> None:
    """``gate run --localize``: localize the blocked single candidate of ``plan``."""
    from gate.models.methods.registry import get_method
    from gate.models.stack import parse_stack

    (candidate,) = plan.candidates
    recipe = candidate.recipe
    stack = parse_stack(recipe)
    parsed = stack.weights if stack.part("weights") is not None else stack.parts[0]
    if not get_method(parsed.name).localizable:
        _echo_err(f"gate: --localize: {parsed} is not a weight-compressed build; not localized")
        return
    _echo_err(f"gate: the build is blocked; localizing {candidate.model} ({parsed})")
    target = None if json_out is None else json_out.with_suffix(".localize.json")
    request = LocalizeRequest(
        candidate=candidate.model,
        recipe=recipe,
        against=candidate.against[0] if candidate.against else None,
        model_slug=candidate.model_slug,
        store=plan.shared.store,
        config=plan.shared.config,
        thresholds=plan.shared.thresholds,
        outputs=LocalizeOutputs(json=target),
        load=candidate.load,
    )
    try:
        run_localize(request, plan.run_config)
    except GateError as exc:  # the run's verdict stands: it is blocked whatever localize says
        _echo_err(f"gate: --localize could not run: {exc.message}")


@click.command("localize")
@click.option("--candidate", required=True, help="Model id, local path, or 'demo'.")
@session_option("recipe", help="The candidate's weight recipe (e.g. quanto-int2, bnb-nf4).")
@click.option("--against", metavar="REF", help="Baseline ref (default: latest).")
@store_option
@session_option("config", help="Run config (gate.toml): [run] defaults and [tiers.fidelity].")
@thresholds_option
@json_option
@file_option("--html", "html_out", help="Also write the HTML report (with the plot) here.")
@file_option("--png", "png_out", help="Also write the per-layer sensitivity plot (PNG) here.")
@click.option(
    "--resolve",
    type=click.FloatRange(0.01, 1.0),
    default=DEFAULT_RESOLVE,
    show_default=True,
    help="Recovered share of the KL loss the swap subset must resolve (sets its size).",
)
@click.option(
    "--prompts",
    "limit",
    type=click.IntRange(min=2),
    help="Reference prompts of the divergence pass (default: the whole pack).",
)
@click.option(
    "--no-gate",
    is_flag=True,
    help="Propose the repaired build without gating it.",
)
@session_option("model_slug", help="Store slug of the baselines (default: from --candidate).")
@load_options
@click.option("--dry-run", is_flag=True, help="Check the inputs and exit 0; loads no model.")
def localize_command(
    candidate: str,
    recipe: str | None,
    against: str | None,
    store: Path,
    config: Path | None,
    thresholds: Path | None,
    json_out: Path | None,
    html_out: Path | None,
    png_out: Path | None,
    resolve: float,
    limit: int | None,
    no_gate: bool,
    model_slug: str | None,
    device: str | None,
    dtype: str | None,
    trust_remote_code: bool | None,
    dry_run: bool,
) -> int:
    """Find the decoder layers that carry a build's loss and gate the repaired build.

    \b
    1. layerwise divergence: per decoder layer, ||h_cand - h_base|| / ||h_base||
       of the hidden states on the baseline's reference prompts;
    2. swap-back: each layer (deep models: blocks of layers, the best refined)
       restored to the baseline; the share of the CGA, CGA@5 and KL loss it
       brings back, on a prompt subset sized by the power maths; layers ranked
       by the mean of those shares (docs/localize.md);
    3. the repair: the top-ranked layers kept, one more at a time, until the
       build is within thresholds.toml's fidelity critical bounds; its byte cost,
       the recipe (keep=...) and each quantizer's syntax; then that recipe is
       gated by `gate run --tiers fidelity` and its verdict printed.

    Exits 0 when the localization ran (whatever the repaired build's verdict),
    3 when a model cannot load, 4 for bad input.

    \b
    Examples:
      gate localize --candidate demo --recipe "quanto-int2:only=model.layers.2.*" --against fp32
      gate localize --candidate demo --recipe quanto-int2 --json all.json --html all.html
    """
    request = LocalizeRequest(
        candidate=candidate,
        recipe=recipe,
        against=against,
        model_slug=model_slug,
        store=explicit_store(store),
        config=config,
        thresholds=thresholds,
        outputs=LocalizeOutputs(json=json_out, html=html_out, png=png_out),
        resolve=resolve,
        limit=limit,
        gate_repair=not no_gate,
        dry_run=dry_run,
        load=load_settings(device, dtype, trust_remote_code),
    )
    return run_localize(request)


__all__ = ["check_localizable", "localize_blocked", "localize_command", "run_localize"]
