"""``gate baseline``: add, record, list, show and promote stored baselines."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table

from gate.commands.options import (
    TIERS_HELP,
    color_option,
    engine_options,
    engine_settings,
    load_options,
    load_settings,
    model_trust_options,
    session_option,
    store_option,
)
from gate.commands.run import runtime_option
from gate.errors import ExitCode, UsageError
from gate.metrics.registry import get_metric
from gate.provenance import ModelProvenance, environment
from gate.report.console import fmt_number, make_console
from gate.session.options import DEFAULT_LABEL, SessionOptions
from gate.session.run_config import CandidateOverrides
from gate.store.baseline import BaselineStore, check_names
from gate.store.measurements_file import load_measurements


@click.group("baseline")
def baseline() -> None:
    """Manage the versioned baseline store.

    Baselines live in STORE/<model-slug>/<NNNN>-<label>.json, numbered and
    never overwritten; named refs (fp16, prod, prev-prod, ...) point at a
    number and are moved with `promote`.

    \b
    Examples:
      gate baseline add examples/baseline.json --model demo --label fp16
      gate baseline record --model demo --label fp16
      gate baseline list
      gate baseline show prod --model demo
      gate baseline promote prod 3 --model demo
    """


def _parse_artifacts(items: tuple[str, ...]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"bad --artifact {item!r}", "write NAME=PATH")
        out[name] = Path(path)
    return out


@baseline.command("add")
@click.argument("measurements", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--model", "model_slug", required=True, metavar="SLUG", help="Model slug.")
@click.option("--label", required=True, help="Label of the new baseline (fp16, nf4-v2, ...).")
@click.option(
    "--artifact",
    "artifacts",
    multiple=True,
    metavar="NAME=PATH",
    help="A file to store beside the baseline (e.g. reference-pack=pack.npz). Repeatable.",
)
@click.option("--ref", "refs", multiple=True, help="Also point this ref at it. Repeatable.")
@store_option
def add(
    measurements: Path,
    model_slug: str,
    label: str,
    artifacts: tuple[str, ...],
    refs: tuple[str, ...],
    store: Path,
) -> int:
    """Store MEASUREMENTS (a measurements JSON from any tool) as a new baseline.

    \b
    Example:
      gate baseline add examples/baseline.json --model demo --label fp16 --ref fp16
    """
    files = _parse_artifacts(artifacts)
    parsed = load_measurements(measurements)
    for measurement in parsed.measurements:
        get_metric(measurement.name)
    # BaselineStore.add checks every name first, then stores the baseline, its
    # artifacts and its refs in one locked step.
    stored = BaselineStore(store).add(
        model_slug,
        label,
        parsed.measurements,
        provenance=parsed.model,
        environment=parsed.environment or environment(),
        artifacts=files,
        refs=tuple(dict.fromkeys(refs)),
    )
    click.echo(f"stored baseline {stored.display} at {stored.path}")
    for ref in dict.fromkeys(refs):
        click.echo(f"ref {ref} -> #{stored.number:04d}")
    return int(ExitCode.OK)


@baseline.command("list")
@click.option("--model", "model_slug", metavar="SLUG", help="Only this model.")
@store_option
@color_option
def list_(model_slug: str | None, store: Path, color: bool | None) -> int:
    """List stored baselines with their refs.

    \b
    Example:
      gate baseline list --model demo
    """
    target = BaselineStore(store)
    table = Table(box=box.SIMPLE_HEAD, title=f"baselines in {store}", title_justify="left")
    for column in ("model", "#", "label", "created", "metrics", "refs"):
        table.add_column(column, no_wrap=True)
    slugs = [model_slug] if model_slug else target.slugs()
    for slug in slugs:
        refs = target.refs(slug)
        for item in target.list(slug):
            names = sorted(r for r, n in refs.items() if n == item.number)
            table.add_row(
                slug,
                f"{item.number:04d}",
                item.label,
                item.created,
                str(len(item.measurements)),
                ", ".join(names),
            )
    make_console(color=color).print(table)
    return int(ExitCode.OK)


@baseline.command("show")
@click.argument("ref", metavar="REF_OR_PATH")
@click.option("--model", "model_slug", metavar="SLUG", help="Model slug.")
@store_option
@color_option
def show(ref: str, model_slug: str | None, store: Path, color: bool | None) -> int:
    """Show one baseline: provenance, artifacts and metrics.

    \b
    Example:
      gate baseline show prod --model demo
    """
    item = BaselineStore(store).resolve(ref, model_slug)
    console = make_console(color=color)
    console.print(f"baseline {item.display}  {item.path}")
    console.print(f"created: {item.created or '-'}")
    for key, value in sorted(item.provenance.to_document().items()):
        if not isinstance(value, (dict, list)):
            console.print(f"  {key}: {value}")
    recorder = recorder_line(item.provenance)
    if recorder is not None:
        console.print(recorder)
    for name, record in sorted(item.artifacts.items()):
        console.print(f"  artifact {name}: {record['file']} sha256 {record['sha256'][:16]}...")
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("metric", "value", "n", "slices"):
        table.add_column(column, no_wrap=column != "slices")
    for name, measurement in sorted(item.measurements.items()):
        table.add_row(
            name,
            fmt_number(measurement.value),
            str(measurement.n),
            ", ".join(sorted(measurement.breakdown)),
        )
    console.print(table)
    return int(ExitCode.OK)


def recorder_line(provenance: ModelProvenance) -> str | None:
    """What the fidelity reference recorder cut and dropped (``None`` without a reference):
    prompts cut at the baseline's first self-disagreement, and prompts left empty, which
    stay in the pack but are never scored."""
    prompts = provenance.fidelity_prompts
    if prompts is None:
        return None
    cut = _or_unknown(provenance.fidelity_prompts_truncated)
    empty = _or_unknown(provenance.fidelity_prompts_empty)
    tokens = provenance.fidelity_tokens_cut
    removed = f" ({tokens} generated tokens removed)" if tokens is not None else ""
    no_tail = provenance.extra.get("fidelity_no_tail_samples")
    bound = f"; {no_tail} (the KL against it is a lower bound)" if isinstance(no_tail, str) else ""
    return (
        f"fidelity reference: {prompts} prompts; {cut} cut at the baseline's first "
        f"self-disagreement{removed}; {empty} left empty (not scored){bound}"
    )


@baseline.command("promote")
@click.argument("ref")
@click.argument("target", metavar="NUMBER_OR_REF")
@click.option("--model", "model_slug", metavar="SLUG", help="Model slug.")
@store_option
def promote(ref: str, target: str, model_slug: str | None, store: Path) -> int:
    """Point REF at a baseline; the old target becomes prev-REF.

    \b
    Examples:
      gate baseline promote prod 3 --model demo       # prod -> #0003, prev-prod -> old prod
      gate baseline promote prod latest --model demo
    """
    items = BaselineStore(store)
    chosen = items.resolve(target, model_slug)
    old = items.promote(chosen.slug, ref, chosen.number)
    moved = f"#{old:04d} -> " if old is not None else ""
    click.echo(f"{chosen.slug}: {ref} {moved}#{chosen.number:04d}")
    if old is not None and old != chosen.number:
        click.echo(f"{chosen.slug}: prev-{ref} -> #{old:04d}")
    return int(ExitCode.OK)


@baseline.command("record")
@click.option(
    "--model",
    help="Model id, local directory, .gguf file, or 'demo' (default: [run].baseline of --config).",
)
@session_option(
    "label", default=DEFAULT_LABEL, show_default=True, help="Label of the new baseline."
)
@click.option("--tiers", help=TIERS_HELP)
@session_option("recipe", help="Compression recipe applied before measuring (default: none).")
@session_option("model_slug", help="Store slug (default: derived from --model).")
@session_option("ref", help="Also point this ref at the new baseline (e.g. fp16).")
@session_option(
    "config",
    help="Run config (gate.toml): records [run].baseline with its [run] and [tiers] settings.",
)
@model_trust_options
@load_options
@store_option
@runtime_option
@engine_options
def record_command(
    model: str | None,
    label: str,
    tiers: str | None,
    recipe: str | None,
    model_slug: str | None,
    ref: str | None,
    config: Path | None,
    allow_pickle: bool,
    allow_incomplete_weights: bool,
    device: str | None,
    dtype: str | None,
    trust_remote_code: bool | None,
    store: Path,
    runtime: str | None,
    **engine: Any,
) -> int:
    """Measure MODEL with the tier suites and store the result as a new baseline.

    With --config, the model is [run].baseline of the run config (unless
    --model is given), and its [run] tiers, store, model_slug, thresholds,
    calibration, device, dtype and trust_remote_code and its [tiers.<name>]
    settings apply; flags override them.
    The candidates of the config are not recorded: they are what `gate run
    --config` compares with this baseline.

    \b
    Examples:
      gate baseline record --model demo --label fp16 --ref fp16
      gate baseline record --config gate.toml --label fp16 --ref fp16
      gate baseline record --model ./llama-8b --tiers fidelity,accuracy
      gate baseline record --model demo --label fp32-served --tiers fidelity \
        --serve "$PY -m vllm.entrypoints.openai.api_server --model gate/assets/demo_model
                 --served-model-name demo --dtype float32 --max-logprobs 64
                 --gpu-memory-utilization 0.2"

    \b
    Served baseline (docs/serving.md): with --serve/--endpoint (repeatable:
    replicas) the model is measured as that engine serves it; MODEL names the
    tokenizer. The reference pack then holds no sampled tail (an engine returns
    its top-k log-probs only), says so, and the KL against it is the top-k +
    tail-bucket lower bound.
    """
    from gate.session.runner import parse_tiers

    given = CandidateOverrides(
        candidate=model,
        recipe=recipe,
        tiers=parse_tiers(tiers),
        model_slug=model_slug,
        engine=engine_settings(**engine),
        runtime=runtime,
        load=load_settings(device, dtype, trust_remote_code),
    )
    trust = SessionOptions(
        allow_pickle=allow_pickle, allow_incomplete_weights=allow_incomplete_weights
    )
    return _record(given, trust, label=label, ref=ref, config=config, store=store)


def _record(
    given: CandidateOverrides,
    trust: SessionOptions,
    *,
    label: str,
    ref: str | None,
    config: Path | None,
    store: Path,
) -> int:
    """Record ``given.candidate`` (else ``[run].baseline`` of ``config``): the command line
    over ``[run]`` (:func:`~gate.session.run_config.command_line_over`), its inputs checked
    before any model loads, then one record session."""
    from gate.commands.run import effective_store
    from gate.models.precheck import check_model_file, check_recipe_runs
    from gate.session.inputs import prepare_session
    from gate.session.run_config import RunDefaults, command_line_over, load_run_config
    from gate.session.runner import run_session

    run_config = load_run_config(config) if config is not None else None
    defaults = run_config.run if run_config is not None else RunDefaults()
    model = given.candidate or defaults.baseline
    if model is None:
        raise UsageError(
            "no model to record",
            "give --model MODEL, or set baseline = ... under [run] of the --config file",
        )
    layered = command_line_over(given, defaults)
    target = effective_store(store, run_config)
    _check_before_recording(target, label, ref, layered.model_slug)
    options = replace(
        trust,
        recipe=given.recipe,
        store=target,
        thresholds=defaults.thresholds,
        label=label,
        model_slug=layered.model_slug,
        config=config,
        ref=ref,
        calibration=layered.calibration,
        engine=given.engine,
        runtime=given.runtime,
        load=layered.load,
    )
    if options.engine is not None and options.engine.paired:
        raise UsageError(
            "--baseline-serve/--baseline-endpoint given to baseline record",
            "they time a baseline beside a candidate in `gate run`; drop them here",
        )
    # bad input fails here, before any model loads; the session reads nothing again
    inputs = prepare_session("record", model, options, run_config=run_config)
    check_model_file(model)  # a wrong path is input (exit 4), as in gate run's plan
    if given.recipe is not None:
        check_recipe_runs(model, given.recipe)
    return int(run_session(inputs, tiers=layered.tiers))


def _check_before_recording(
    store: Path, label: str, ref: str | None, model_slug: str | None
) -> None:
    """Refuse bad names and an unwritable store before measuring anything (exit 4)."""
    check_names(label=label, refs=(ref,) if ref else (), model_slug=model_slug)
    BaselineStore(store).check_writable()


def _or_unknown(count: int | None) -> int | str:
    """A recorder count, ``"?"`` when the baseline does not record it."""
    return "?" if count is None else count
