"""Stacked and speculative builds through the command line, on the packaged demo model.

* ``quanto-int4+kv-snapkv:0.5`` gated on fidelity against the packaged fp32
  baseline: both parts act, and the results JSON lists each with its own count;
* a baseline recorded with ``spec-ngram:3`` and the same build run against it:
  exit 0, the drafter in the candidate's provenance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ExitCode
from tests.cli_support import run_gate

pytestmark = pytest.mark.slow


def _metric(results: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(m for m in results["metrics"] if m["name"] == name)
    return found


def test_a_weight_format_and_a_kv_method_both_act_and_are_listed(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    config = tmp_path / "gate.toml"
    config.write_text("[tiers.fidelity]\nlimit = 12\n", encoding="utf-8")
    done = run_gate(
        "run", "--candidate", "demo", "--recipe", "quanto-int4+kv-snapkv:0.5",
        "--against", "fp32", "--tiers", "fidelity", "--config", str(config), "--json", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode in (ExitCode.OK, ExitCode.BLOCKED), done.stdout[-3000:] + done.stderr
    results = json.loads(out.read_text())
    stamp = _metric(results, "fidelity.cga")["details"]["compression_exercised"]
    assert stamp["method"] == "quanto-int4+kv-snapkv:0.5"
    parts = {part["method"]: part for part in stamp["parts"]}
    assert list(parts) == ["quanto-int4", "kv-snapkv:0.5"]
    assert parts["quanto-int4"]["unit"] == "linear modules quantized"
    assert parts["quanto-int4"]["acted"] > 0
    assert parts["kv-snapkv:0.5"]["unit"] == "KV pairs evicted"
    assert parts["kv-snapkv:0.5"]["acted"] > 0 and parts["kv-snapkv:0.5"]["exercised"] > 0
    assert "NOT EXERCISED" not in done.stdout


def test_a_speculative_baseline_and_the_same_build_pass(tmp_path: Path) -> None:
    config = tmp_path / "gate.toml"
    config.write_text(
        "[tiers.speculative]\nlimit = 4\nmax_new_tokens = 16\nspeed_prompts = 2\n",
        encoding="utf-8",
    )
    store = tmp_path / "store"
    common = ("--tiers", "speculative", "--config", str(config), "--store", str(store))
    recorded = run_gate(
        "baseline", "record", "--model", "demo", "--recipe", "spec-ngram:3", "--ref", "ngram",
        *common, cwd=tmp_path,
    )  # fmt: skip
    assert recorded.returncode == ExitCode.OK, recorded.stdout[-3000:] + recorded.stderr
    out = tmp_path / "same.json"
    done = run_gate(
        "run", "--candidate", "demo", "--recipe", "spec-ngram:3", "--against", "ngram",
        *common, "--json", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == ExitCode.OK, done.stdout[-3000:] + done.stderr
    results = json.loads(out.read_text())
    assert _metric(results, "speculative.lossless")["value"] == 1.0
    length = _metric(results, "speculative.acceptance_length")
    assert length["value"] >= 1.0 and length["severity"] != "critical"
    stamp = length["details"]["compression_exercised"]
    assert stamp["method"] == "spec-ngram:3" and stamp["unit"] == "draft tokens proposed"
    provenance = json.dumps(results)
    assert '"kind": "prompt lookup"' in provenance
