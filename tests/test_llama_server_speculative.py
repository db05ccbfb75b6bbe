"""The speculative tier on llama-server (b11434, CPU build), gated end to end.

Marked ``engine`` and ``slow`` (two llama-servers per run: the speculative command
as given and the plain one gate writes from it). SmolLM2's ``.gguf`` with n-gram
speculation (``--spec-type ngram-simple``) is recorded, then gated with an n-gram
setting that finds no draft on these prompts: blocked on
``speculative.acceptance_length``, read from the answers' timings (``draft_n``,
``draft_n_accepted``), the tokens lossless. Figures are printed (run with ``-s``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.errors import ExitCode
from tests.cli_support import run_gate
from tests.gguf_support import smollm2_file
from tests.llama_cpp_support import built_llama_cpp

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _metrics(path: Path) -> dict[str, dict[str, object]]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {m["name"]: m for m in doc["metrics"]}


def test_llama_server_ngram_speculation_is_gated_on_its_own_counters(tmp_path: Path) -> None:
    server = built_llama_cpp().server
    model = smollm2_file()

    def command(n: int, m: int) -> str:
        return (
            f"{server} -m {model} -c 4096 -np 1 -t 1 --spec-type ngram-simple"
            f" --spec-ngram-simple-size-n {n} --spec-ngram-simple-size-m {m}"
        )

    (tmp_path / "gate.toml").write_text(
        "[tiers.speculative]\nlimit = 8\nmax_new_tokens = 24\nspeed_prompts = 0\n",
        encoding="utf-8",
    )
    common = ["--tiers", "speculative", "--store", str(tmp_path / "store")]
    common += ["--config", str(tmp_path / "gate.toml")]
    recorded = run_gate(
        "baseline", "record", "--model", "smollm2", "--serve", command(2, 4), "--ref", "ngram",
        *common, cwd=tmp_path,
    )  # fmt: skip
    assert recorded.returncode == ExitCode.OK, recorded.stdout[-3000:] + recorded.stderr[-3000:]
    (stored,) = (tmp_path / "store").rglob("0001-*.json")
    base = _metrics(stored)
    assert base["speculative.lossless"]["value"] == 1.0
    assert (
        base["speculative.acceptance_length"]["value"] > 1.2
    )  # drafts were accepted (1.35 when measured, 24 tokens)
    # a longer n-gram to match and shorter drafts: no draft on these prompts
    gated = run_gate(
        "run", "--candidate", "smollm2", "--serve", command(4, 2), "--against", "ngram",
        "--json", str(tmp_path / "r.json"), *common, cwd=tmp_path,
    )  # fmt: skip
    print(f"\n[llama-server speculative] base {base['speculative.acceptance_length']['value']}")
    assert gated.returncode == ExitCode.BLOCKED, gated.stdout[-3000:] + gated.stderr[-3000:]
    results = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    critical = {v["name"] for v in results["metrics"] if v["severity"] == "critical"}
    assert critical == {"speculative.acceptance_length"}
    lossless = [v for v in results["metrics"] if v["name"] == "speculative.lossless"]
    assert lossless and lossless[0]["value"] == 1.0
