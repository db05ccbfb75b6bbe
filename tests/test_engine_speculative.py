"""The speculative tier on real served builds: vLLM's CPU build and llama-server.

Marked ``engine`` and ``slow`` (two servers start per run: the speculative command
as given and the plain one gate writes from it).

* vLLM: ``gate baseline record --serve CMD --tiers speculative`` on the demo model,
  CMD carrying ``--speculative-config`` with vLLM's n-gram proposer: the tier runs
  end to end, the served tokens equal the plain server's (lossless 1), and the
  engine's own counters say the drafter helped (acceptance length above 1).
* llama-server: SmolLM2's ``.gguf`` with n-gram speculation recorded, then gated
  with an n-gram setting that finds no draft on these prompts: blocked on
  ``speculative.acceptance_length`` (the timings' counters), the tokens lossless.

Figures are printed (run with ``-s``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.errors import ExitCode
from tests.cli_support import run_gate
from tests.engine_support import engine_env, engine_python, vllm_command
from tests.gguf_support import smollm2_file
from tests.llama_cpp_support import built_llama_cpp

pytestmark = [pytest.mark.engine, pytest.mark.slow]


NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}


def test_served_ngram_speculation_records_through_the_cli(
    engine_cache: Path, tmp_path: Path
) -> None:
    command = vllm_command(
        engine_python(), "--dtype", "float32", "--speculative-config", json.dumps(NGRAM)
    )
    (tmp_path / "gate.toml").write_text(
        "[tiers.speculative]\nlimit = 4\nmax_new_tokens = 32\nspeed_prompts = 2\n",
        encoding="utf-8",
    )
    done = run_gate(
        "baseline",
        "record",
        "--model",
        "demo",
        "--serve",
        command,
        "--tiers",
        "speculative",
        "--ref",
        "ngram",
        "--store",
        str(tmp_path / "store"),
        "--config",
        str(tmp_path / "gate.toml"),
        "--server-log",
        str(tmp_path / "logs" / "server.log"),
        cwd=tmp_path,
        env=engine_env(engine_cache),
    )
    assert done.returncode == ExitCode.OK, done.stdout[-3000:] + done.stderr[-3000:]
    recorded = sorted((tmp_path / "store").rglob("*.json"))
    found = {}
    for path in recorded:
        doc = json.loads(path.read_text(encoding="utf-8"))
        for m in doc.get("metrics", []) if isinstance(doc, dict) else []:
            found[m["name"]] = m
    assert {"speculative.lossless", "speculative.acceptance_length"} <= set(found), recorded
    length = found["speculative.acceptance_length"]
    details = length["details"]
    print(
        f"\n[engine speculative figures] {json.dumps({k: found[k]['value'] for k in found})}"
        f" details: {json.dumps(details)}"
        f" speedup: {json.dumps(found.get('speculative.speedup', {}).get('details'))}"
    )
    assert found["speculative.lossless"]["value"] == 1.0
    assert found["speculative.confident_divergences"]["value"] == 0.0
    assert length["value"] > 1.0
    assert details["accepted"] > 0 and details["drafted_steps"] > 0
    assert len(details["position_rates"]) == NGRAM["num_speculative_tokens"]
    assert details["speculation"]["method"] == "ngram"
    assert "speculative.speedup" in found
    # the plain server's log beside the build's: it ran without speculation
    plain_log = (tmp_path / "logs" / "server.plain.log").read_text(encoding="utf-8")
    assert "'speculative_config'" not in plain_log
    assert "'speculative_config'" in (tmp_path / "logs" / "server.log").read_text(encoding="utf-8")


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
        "[tiers.speculative]\nlimit = 8\nmax_new_tokens = 32\nspeed_prompts = 0\n",
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
    )  # drafts were accepted (1.35 when measured)
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
