"""``gate init``: a run config, thresholds and CI workflows for a team's repository."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("init")
@click.option(
    "--model",
    required=True,
    help="The baseline model: a Hugging Face id (org/name), a local directory, or 'demo'.",
)
@click.option(
    "--ref",
    help="Baseline ref the candidates are compared with (default: fp32 for demo, else base).",
)
@click.option(
    "--action",
    help="The gate GitHub Action the workflows use, OWNER/REPO@REF (default: the repository "
    "and commit this gate was pip-installed from, else OWNER/gate@v<version> to edit).",
)
@click.option(
    "--dir",
    "root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("."),
    show_default=True,
    help="The repository's root directory.",
)
def init(model: str, ref: str | None, action: str | None, root: Path) -> int:
    """Set up gate in your repository: gate.toml, thresholds.toml and two workflows.

    \b
    Writes, and never overwrites (a file already there: one line naming it,
    exit 4, nothing written):
      gate.toml                            the run config: [run].baseline = MODEL,
                                           a "control" candidate, your builds to add
      thresholds.toml                      the packaged default bounds
      .github/workflows/gate.yml           the pull-request gate, one job per candidate
                                           on self-hosted runners, an always-running
                                           verdict job to require
      .github/workflows/latency-audit.yml  the weekly latency drift audit
    The workflows install gate through its GitHub Action (action.yml), at the
    ref --action names. Then prints what to do next.

    \b
    Examples:
      gate init --model demo
      gate init --model meta-llama/Llama-3.1-8B-Instruct --ref fp16 --action acme/gate@v0.1.0
    """
    from gate.ci.scaffold import check_settings, next_steps, render_targets, write_new

    settings = check_settings(model, ref, action)
    written = write_new(root, render_targets(settings))
    for path in written:
        click.echo(f"gate init: wrote {path}")
    click.echo("next:")
    for number, step in enumerate(next_steps(settings), start=1):
        click.echo(f"  {number}. {step}")
    return 0


@click.command("watched", hidden=True)
@click.option("--config", type=click.Path(path_type=Path), default=Path("gate.toml"))
@click.option(
    "--changed",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File of changed paths, one per line (git diff --name-only).",
)
def watched(config: Path, changed: Path | None) -> int:
    """The paths a run config's verdict depends on; whether a change touches them.

    The gate workflow's ``changes`` job (action.yml) runs it on a small hosted
    runner; it reads the config with the standard library only.
    """
    from gate.ci.watched import verdict_lines

    for line in verdict_lines(config, changed, Path.cwd()):
        click.echo(line)
    return 0
