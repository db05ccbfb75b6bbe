"""The load tier end to end: the real GuideLLM against the session's real vLLM servers.

``gate run --tiers load`` with the float32 server (``served``) as the baseline
build (``--baseline-endpoint``) and, as the candidate (``--endpoint``):

* the same float32 server: the goodput ratio's interval contains 1, exit 0;
* the FP8 server (``served_fp8``, FP8 weights emulated on this CPU, slower
  than float32 here): blocked by ``min_speedup`` (the interval's upper end
  is below 1), exit 1.

GuideLLM comes from its own cached environment (:func:`guidellm_command`
installs it once through ``scripts/setup_tool_env.sh guidellm``). The sweeps
are short (two rates of a few seconds, two repeats) so the suite keeps its
time; the users' default is the full sweep of :class:`gate.tiers.load.LoadSettings`.
The figures are printed (``-s``).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ExitCode
from gate.models.backends.http import HTTPBackend
from gate.models.guidellm import GUIDELLM_VERSION, default_executable
from tests.cli_support import run_gate
from tests.engine_support import engine_env

pytestmark = [pytest.mark.engine, pytest.mark.goodput, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
_COMMAND: list[str] = []


def guidellm_command() -> str:
    """GuideLLM's command from its cached tool environment (installed here when missing)."""
    if _COMMAND:
        return _COMMAND[0]
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup_tool_env.sh"), "guidellm"],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        pytest.fail(f"scripts/setup_tool_env.sh guidellm failed: {tail}", pytrace=False)
    command = Path(done.stdout.strip().splitlines()[-1]).with_name("guidellm")
    assert command == default_executable(), command
    _COMMAND.append(str(command))
    return str(command)


#: A short sweep: two rates, 3 s each, two interleaved repeats; requests of 32 + 16 tokens.
#: The SLO's ITL bound (80 ms) sits between the float32 server's p95 ITL (35-70 ms on the
#: shared 2-core machine) and the FP8 server's (above 100 ms: its FP8 weights are emulated
#: on this CPU, about 5x slower per token); its TTFT bound only catches a stalled server.
#: ``sustain`` is low because a 3 s window cuts off most requests of a loaded machine.
SHORT_SWEEP = """
[tiers.load]
rates = [1.0, 4.0]
duration_s = 3.0
repeats = 2
prompt_tokens = 32
output_tokens = 16
sustain = 0.2
ttft_p95_ms = {ttft}
itl_p95_ms = {itl}
min_speedup = 1.0
guidellm = "{guidellm}"
output_dir = "{out}"
"""


def _load_run(
    tmp_path: Path, cache: Path, candidate: HTTPBackend, baseline: HTTPBackend, **slo: float
) -> tuple[int, dict[str, Any], float]:
    config = tmp_path / "gate.toml"
    config.write_text(
        SHORT_SWEEP.format(guidellm=guidellm_command(), out=tmp_path / "guidellm", **slo)
    )
    out = tmp_path / "results.json"
    started = time.perf_counter()
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--against",
        "fp32",
        "--tiers",
        "load",
        "--config",
        str(config),
        "--endpoint",
        candidate.settings.base_url,
        "--baseline-endpoint",
        baseline.settings.base_url,
        "--json",
        str(out),
        "--html",
        str(tmp_path / "report.html"),
        cwd=tmp_path,
        env=engine_env(cache),
    )
    wall = time.perf_counter() - started
    assert out.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return done.returncode, json.loads(out.read_text()), wall


def _goodput(results: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in results["metrics"] if m["name"] == "load.goodput_ratio")


def _figures(name: str, code: int, results: dict[str, Any], wall: float) -> None:
    good = _goodput(results)
    details = good["details"]
    print(
        f"\n[load figures] {name}: "
        + json.dumps(
            {
                "exit": code,
                "goodput_ratio": good["value"],
                "ci": details["ratio_ci"],
                "per_sweep": details["per_sweep"],
                "sweep_wall_s": details["wall_s"],
                "run_wall_s": wall,
            },
            default=float,
        )
    )


def test_float32_against_itself_passes(
    engine_cache: Path, served: HTTPBackend, tmp_path: Path
) -> None:
    code, results, wall = _load_run(tmp_path, engine_cache, served, served, ttft=5000.0, itl=80.0)
    _figures("float32 vs float32", code, results, wall)
    good = _goodput(results)
    low, high = good["details"]["ratio_ci"]
    assert low <= 1.0 <= high
    assert code == ExitCode.OK and results["verdict"] in ("pass", "warn")
    assert good["severity"] != "critical"
    # GuideLLM's own files, and the report's plot beside the HTML
    assert sorted(
        p.name for p in (tmp_path / "guidellm").glob("*.json") if "scenario" not in p.name
    ) == [
        "baseline-1.json",
        "baseline-2.json",
        "candidate-1.json",
        "candidate-2.json",
    ]
    assert (tmp_path / "report.load.png").stat().st_size > 1000
    assert 'id="plot-load"' in (tmp_path / "report.html").read_text()
    assert good["details"]["guidellm_version"] == GUIDELLM_VERSION


def test_fp8_build_is_blocked_by_min_speedup(
    engine_cache: Path, served: HTTPBackend, served_fp8: HTTPBackend, tmp_path: Path
) -> None:
    code, results, wall = _load_run(
        tmp_path, engine_cache, served_fp8, served, ttft=5000.0, itl=80.0
    )
    _figures("fp8 vs float32", code, results, wall)
    good = _goodput(results)
    assert good["severity"] == "critical", good["reason"]
    assert good["details"]["ratio_ci"][1] < 1.0
    assert code == ExitCode.BLOCKED and results["verdict"] == "block"
