"""The ``gate`` click group: every command module under :mod:`gate.commands`, assembled."""

from __future__ import annotations

import click

from gate import __version__, progress
from gate.commands.audit import audit
from gate.commands.baseline import baseline
from gate.commands.calibrate import calibrate
from gate.commands.compare import compare
from gate.commands.demo import demo
from gate.commands.import_ import import_
from gate.commands.init import init, watched
from gate.commands.localize import localize_command
from gate.commands.merge import merge
from gate.commands.power import power
from gate.commands.run import run

#: Every top-level command, in ``--help`` order.
COMMANDS: tuple[click.Command, ...] = (
    init,
    run,
    merge,
    demo,
    compare,
    baseline,
    import_,
    audit,
    calibrate,
    localize_command,
    power,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gate")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="No progress on stderr (lines or live bars; same as GATE_PROGRESS=off). "
    "Errors, warnings and the report still print. Put it before the command: gate -q run ...",
)
def cli(quiet: bool) -> None:
    """Regression gate for compressed LLM builds.

    Measures a candidate build (quantized, pruned, ...) in tiers — accuracy,
    capability probes, fidelity to the baseline, latency/memory — compares it
    with a versioned baseline and thresholds.toml, prints a severity report and
    exits nonzero on a regression.

    \b
    Exit codes (the last line names the outcome, e.g. "ERROR (input, exit 4)"):
      0 APPROVED (warnings allowed unless --strict)
      1 BLOCKED by a regression (or, under --strict, a warning or a baseline
        metric the run did not measure)
      2 INTERRUPTED (Ctrl-C, SIGINT or SIGTERM; the store is left as it was)
      3 ERROR (internal or model load)
      4 ERROR (input): usage, config, thresholds, baseline, data, store or
        an unwritable report path
      5 NOTHING MEASURED

    Long work (loading, generating, scoring, probes, judging) shows progress
    on stderr: a live bar on a terminal, plain done/total lines with the time
    left elsewhere (CI logs). GATE_PROGRESS=rich|plain|off forces a style.
    """
    progress.speak_alone(quiet=quiet)  # also for the sessions and processes it starts


for _command in COMMANDS:
    cli.add_command(_command)
#: Hidden: the gate workflow's ``changes`` job (action.yml), not a command users type.
cli.add_command(watched)

__all__ = ["COMMANDS", "cli"]
