"""The speculative tier on a real served build: vLLM's CPU build with n-gram speculation.

Marked ``engine`` and ``slow`` (two vLLM servers start: the speculative command as
given and the plain one gate writes from it). ``gate baseline record --serve CMD
--tiers speculative`` on the demo model, CMD carrying ``--speculative-config``
with vLLM's n-gram proposer: the tier runs end to end, the served tokens equal
the plain server's (lossless 1), and the engine's own counters say the drafter
helped (acceptance length above 1). CMD carries an API key and a Hugging Face
token (as tests/test_engine_secrets.py's commands do): nothing gate writes or
prints holds either, both servers' logs included, and the baseline records the
command with the values masked. Figures are printed (run with ``-s``).
llama-server's speculation: tests/test_llama_server_speculative.py (a file of its
own, so the two servers' tests run on two workers).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gate.engines.secrets import MASK
from gate.errors import ExitCode
from tests.cli_support import run_gate
from tests.engine_support import engine_env, engine_python, vllm_command
from tests.secrets_support import (
    HF_TOKEN,
    KEY,
    KEY_VARIABLE,
    baseline_document,
    leaks,
    recorded_command,
)

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
        engine_python(),
        *("--dtype", "float32", "--speculative-config", json.dumps(NGRAM)),
        *("--api-key", KEY, f"--hf-token={HF_TOKEN}"),
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
        "--api-key-env",
        KEY_VARIABLE,
        cwd=tmp_path,
        env={
            **engine_env(engine_cache),
            KEY_VARIABLE: KEY,
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        },
    )
    assert done.returncode == ExitCode.OK, done.stdout[-3000:] + done.stderr[-3000:]
    # no secret anywhere: the store, both servers' logs, gate's cache, the console
    assert leaks(tmp_path, done) == []
    provenance = baseline_document(tmp_path / "store")["provenance"]
    served = recorded_command(provenance)
    assert served[served.index("--api-key") + 1] == MASK and f"--hf-token={MASK}" in served
    assert provenance["api_key_env"] == KEY_VARIABLE
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
