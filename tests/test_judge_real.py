"""The judge tier end to end with real judges: the packaged judge models and the demo model.

A demo baseline is recorded with the judge tier into a temporary store (its answers
stored as the ``judge-outputs`` artifact), then ``gate run`` gates real builds of the
demo model against it, with ``gate/assets/judge_model`` (and
``gate/assets/judge_model_small`` as a second judge of another size and seed):

* the baseline against itself: every pair a tie, Elo 0 within its CI, approved;
* damaged builds (``drop-layers:2``, ``quanto-int2``): a significantly negative Elo
  delta, blocked; the control approved; ``drop-layers:2`` run a second time makes no
  judge call (its verdicts come from the first run's cache);
* two real judges: swap-inconsistent pairs and disagreements are excluded (checked
  against the raw per-judge answers), and a bound they exceed makes the tier
  UNSTABLE: exit 5, the reason in the report;
* bad input: a judge endpoint that is down (exit 3), a baseline recorded without the
  judge tier (exit 4), a template without its placeholders (exit 4 at ``--dry-run``).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from gate.errors import ExitCode
from tests.cli_support import GateRun, run_gate

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
JUDGE = REPO / "gate" / "assets" / "judge_model"
SMALL = REPO / "gate" / "assets" / "judge_model_small"
#: 96-token replies: the length the packaged judges were trained on. 32 prompts: the damaged
#: builds stay far past the bounds (quanto-int2: Elo -446, 99 % CI [-573, -226], p 0.0009;
#: drop-layers:2: -720, p 2e-10; greedy replies and judges, so the same every run).
SETTINGS = "limit = 32\nmax_new_tokens = 96\nbatch_size = 16\nexamples = 3\n"

needs_judge = pytest.mark.skipif(
    not (JUDGE / "model.safetensors").is_file(), reason="the packaged judge model is absent"
)
needs_two = pytest.mark.skipif(
    not (SMALL / "model.safetensors").is_file(), reason="the second packaged judge is absent"
)


def gate(cwd: Path, *args: str, env: dict[str, str] | None = None) -> GateRun:
    return run_gate(*args, cwd=cwd, env=env)


def config(
    where: Path,
    store: Path,
    candidates: list[tuple[str, str | None]],
    *,
    extra: str = "",
    judges: str = "",
    cache: Path | None = None,
) -> Path:
    lines = [
        "[run]",
        'baseline = "demo"',
        'against = ["fp32"]',
        'tiers = ["judge"]',
        f'store = "{store}"',
    ]
    for name, recipe in candidates:
        lines += ["", "[[candidates]]", f'name = "{name}"', 'model = "demo"']
        if recipe:
            lines.append(f'recipe = "{recipe}"')
    lines += ["", "[tiers.judge]", SETTINGS + extra]
    if cache is not None:
        lines.append(f'cache_dir = "{cache}"')
    lines.append(judges)
    path = where / "gate.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def judge_entry(name: str, model: Path) -> str:
    return f'\n[[judges]]\nname = "{name}"\nmodel = "{model}"\n'


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (JUDGE / "model.safetensors").is_file():
        pytest.skip("the packaged judge model is absent")
    root = tmp_path_factory.mktemp("judge-store")
    cfg = config(root, root / "store", [], cache=root / "cache")
    proc = gate(
        root, "baseline", "record", "--config", str(cfg), "--label", "fp32", "--ref", "fp32"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stored = json.loads((root / "store" / "demo" / "0001-fp32.json").read_text())
    assert "judge-outputs" in stored["artifacts"]
    return root / "store"


def results(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def metric(doc: dict[str, Any], name: str, slice_: str | None = None) -> dict[str, Any]:
    (entry,) = [m for m in doc["metrics"] if m["name"] == name and m["slice"] == slice_]
    return entry


def run(tmp: Path, store: Path, recipe: str | None, **kw: Any) -> tuple[int, dict[str, Any], str]:
    cfg = config(tmp, store, [("c", recipe)], **kw)
    out = tmp / "results.json"
    proc = gate(tmp, "run", "--config", str(cfg), "--json", str(out))
    doc = results(out) if out.is_file() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


@needs_judge
def test_baseline_against_itself_ties_everywhere_and_passes(store: Path, tmp_path: Path) -> None:
    code, doc, log = run(tmp_path, store, None, cache=tmp_path / "cache")
    assert code == ExitCode.OK, log[-3000:]
    elo = metric(doc, "judge.elo_delta")
    (panel,) = doc["judge"]
    tally = panel["tally"]
    assert tally["identical"] + tally["swap_inconsistent"] == tally["pairs"] == 32
    assert elo["value"] == 0.0 and elo["ci"][0] <= 0.0 <= elo["ci"][1]
    assert elo["severity"] == "pass"


@needs_judge
@pytest.mark.parametrize("recipe", ["drop-layers:2", "quanto-int2"])
def test_damaged_builds_are_significantly_worse_and_blocked(
    store: Path, tmp_path: Path, recipe: str
) -> None:
    cache = tmp_path / "cache"
    first_dir = tmp_path / "one"
    first_dir.mkdir()
    code, doc, log = run(first_dir, store, recipe, cache=cache)
    assert code == ExitCode.BLOCKED, log[-3000:]
    elo = metric(doc, "judge.elo_delta")
    assert elo["severity"] == "critical" and elo["value"] < -35
    assert elo["ci"][1] < 0 and elo["p_value"] < 0.01
    assert "judge panel vs fp32: STABLE" in log and "Elo delta" in log
    (panel,) = doc["judge"]
    judges = panel["judges"]
    assert judges[0]["calls"] > 0 and judges[0]["tokens"] > 0
    if recipe == "drop-layers:2":  # once is enough to show the cache
        _a_second_identical_run_makes_no_judge_call(store, tmp_path, doc)


def _a_second_identical_run_makes_no_judge_call(
    store: Path, tmp_path: Path, first: dict[str, Any]
) -> None:
    """The same candidate again, with the first run's judge cache: every verdict from it."""
    second_dir = tmp_path / "two"
    second_dir.mkdir()
    _, second, log = run(second_dir, store, "drop-layers:2", cache=tmp_path / "cache")
    ((j1,),) = [panel["judges"] for panel in first["judge"]]
    ((j2,),) = [panel["judges"] for panel in second["judge"]]
    assert j1["calls"] > 0
    assert j2["calls"] == 0 and j2["tokens"] == 0
    assert j2["cache_hits"] == j1["calls"] + j1["cache_hits"]
    assert metric(second, "judge.elo_delta")["value"] == metric(first, "judge.elo_delta")["value"]
    assert "0 calls made" in log


@needs_judge
@needs_two
def test_two_real_judges_exclusions_follow_the_raw_answers(store: Path, tmp_path: Path) -> None:
    """In process, to see every judge's answers: the rules against the raw results."""
    from gate.judge.protocol import PairStatus
    from gate.models.backends.loading import load_backend
    from gate.models.model_spec import ModelSpec
    from gate.store.baseline import BaselineStore
    from gate.store.judge_outputs import read_outputs
    from gate.tiers import judge as tier
    from gate.tiers.judge_outputs import generate_outputs, prompts_of

    baseline = BaselineStore(store).resolve("fp32", "demo")
    base = read_outputs(baseline.artifact_path("judge-outputs"))
    backend = load_backend(ModelSpec.parse("demo"), "quanto-int2")
    cand = generate_outputs(backend, prompts_of(base), max_new_tokens=48, batch_size=16)
    settings = tier.JudgeSettings(
        judges=(
            tier.JudgeConfig(name="big", model=str(JUDGE)),
            tier.JudgeConfig(name="small", model=str(SMALL)),
        ),
        cache_dir=tmp_path / "cache",
        disagreement_bound=1.0,
    )
    result = tier.compare_outputs(cand, base, tier.open_panel(settings), settings)
    measured = {m.name: m for m in result.measurements}
    elo = measured.get("judge.elo_delta")
    scored = set(elo.sample_ids or ()) if elo is not None else set()
    flips = disagreements = 0
    for pid, outcome in zip(result.ids, result.outcomes, strict=True):
        each = outcome.judges
        for j in each:  # swap rule, judge by judge (no validity override)
            if j.status is PairStatus.SWAP_INCONSISTENT:
                assert j.candidate_first is not j.candidate_second and j.outcome is None
        if any(j.status is PairStatus.SWAP_INCONSISTENT for j in each):
            flips += 1
            assert pid not in scored
        if outcome.status is PairStatus.DISAGREEMENT:
            disagreements += 1
            assert len({j.outcome for j in each}) > 1 and pid not in scored
        if outcome.outcome is not None:
            assert pid in scored and {j.outcome for j in each} == {outcome.outcome}
    assert flips > 0 or disagreements > 0  # the rules were exercised on real answers
    assert result.counts.disagreements == disagreements
    if result.counts.decidable:
        assert measured["judge.disagreement"].value == pytest.approx(
            disagreements / result.counts.decidable
        )


@needs_judge
@needs_two
def test_two_real_judges_above_the_bound_are_unstable_exit_5(store: Path, tmp_path: Path) -> None:
    judges = judge_entry("big", JUDGE) + judge_entry("small", SMALL)
    code, doc, log = run(
        tmp_path,
        store,
        "drop-layers:2",
        cache=tmp_path / "cache",
        judges=judges,
        extra="disagreement_bound = 0.0\n",
    )
    rate = metric(doc, "judge.disagreement")["value"]
    assert rate > 0.0, "the two judges agreed on every pair: the bound was not exercised"
    assert code == ExitCode.NO_MEASUREMENTS, log[-3000:]
    assert "judge tier UNSTABLE, no verdict" in log and "above the 0% bound" in log
    assert not any(m["name"] == "judge.elo_delta" for m in doc["metrics"])
    assert doc["exit_code"] == ExitCode.NO_MEASUREMENTS


@needs_judge
def test_judge_endpoint_down_is_one_line_exit_3(store: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judges = (
        f'\n[[judges]]\nname = "remote"\nmodel = "judge"\nendpoint = "http://127.0.0.1:{port}/v1"\n'
    )
    code, _, log = run(tmp_path, store, "drop-layers:2", judges=judges, cache=tmp_path / "c")
    assert code == ExitCode.INTERNAL_ERROR
    errors = [line for line in log.splitlines() if "cannot reach the endpoint" in line]
    assert errors and "Traceback" not in log


@needs_judge
def test_baseline_without_stored_outputs_is_one_line_exit_4(tmp_path: Path) -> None:
    import shutil

    store = tmp_path / "store"
    shutil.copytree(REPO / "gate" / "assets" / "baselines", store)
    path = store / "demo" / "0001-fp32.json"
    stored = json.loads(path.read_text())
    stored.get("artifacts", {}).pop("judge-outputs", None)  # as recorded before the tier existed
    path.write_text(json.dumps(stored))
    code, _, log = run(tmp_path, store, None)
    assert code == ExitCode.USAGE_ERROR
    assert "has no stored judge outputs (recorded without the judge tier)" in log
    assert "Traceback" not in log


def test_template_without_placeholders_fails_the_dry_run(tmp_path: Path) -> None:
    bad = tmp_path / "pairwise.txt"
    bad.write_text("Which is better? Answer A, B or tie.\n")
    cfg = config(
        tmp_path, tmp_path / "store", [("c", None)], extra=f'pairwise_template = "{bad}"\n'
    )
    proc = gate(tmp_path, "run", "--config", str(cfg), "--dry-run")
    assert proc.returncode == ExitCode.USAGE_ERROR
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert (
        len(lines) == 1
        and "lacks the placeholder(s) {prompt} {response_a} {response_b}" in lines[0]
    )
