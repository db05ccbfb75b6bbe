"""Every engine-setting rule lives in one place, whichever command reaches it.

Each command that takes engine options (``gate run``, ``gate baseline record``,
``gate calibrate``) reads them through
:func:`gate.engines.settings.engine_from_options`: a broken rule is the
same one line and exit 4 from each (``gate calibrate`` with both ``--serve``
and ``--endpoint`` used to end in an internal error, exit 3), before anything
is loaded, started or written. The suites' ``--gate-*`` options share the
reader (tests/test_engine_options.py runs them through pytest).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gate.cli import main
from gate.errors import ExitCode
from gate.workflows.plan import packaged_store

#: (the broken engine options, what the one line says)
RULES: dict[str, tuple[tuple[str, ...], str]] = {
    "both-serve-and-endpoint": (
        ("--serve", "X", "--endpoint", "http://127.0.0.1:9/v1"),
        "exactly one of serve and endpoint",
    ),
    "a-setting-without-an-engine": (
        ("--served-model", "m"),
        "--served-model given without an engine",
    ),
    "an-api-key-without-an-engine": (
        ("--api-key-env", "GATE_KEY"),
        "--api-key-env given without an engine",
    ),
}


def _commands(tmp: Path) -> dict[str, list[str]]:
    """Each command that takes engine options, otherwise valid (none loads a model here)."""
    store = tmp / "baselines"
    shutil.copytree(packaged_store(), store)
    return {
        "run": ["run", "--candidate", "demo", "--store", str(store), "--dry-run"],
        "baseline record": [
            "baseline",
            "record",
            "--model",
            "demo",
            "--label",
            "e",
            "--tiers",
            "fidelity",
            "--store",
            str(store),
        ],
        "calibrate": ["calibrate", "--model", "demo", "--out", str(tmp / "c.toml"), "--dry-run"],
    }


@pytest.mark.parametrize("rule", sorted(RULES))
def test_an_engine_rule_is_the_same_line_and_exit_4_from_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rule: str
) -> None:
    options, fragment = RULES[rule]
    lines = {}
    for command, args in _commands(tmp_path).items():
        code = main([*args, *options])
        out, err = capsys.readouterr()
        errors = [line for line in err.splitlines() if line.startswith("gate: error:")]
        assert code == ExitCode.USAGE_ERROR, (command, out, err)
        assert len(errors) == 1 and fragment in errors[0], (command, err)
        assert "Traceback" not in out + err and "internal error" not in err, (command, err)
        lines[command] = errors[0]
    assert len(set(lines.values())) == 1, lines  # one rule, one line, whichever command
    assert not (tmp_path / "c.toml").exists()  # nothing half-written
    assert sorted(p.name for p in (tmp_path / "baselines" / "demo").iterdir()) == sorted(
        p.name for p in (packaged_store() / "demo").iterdir()
    )  # nothing recorded
