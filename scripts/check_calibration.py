"""Check a calibrated thresholds file on the demo model, in one process (docs/adopting.md).

``python scripts/check_calibration.py cal.toml [--reruns N] [--recipe R ...] [--first K]``:
N reruns of the unmodified demo model gated with the file against the committed ``fp32``
baseline must all be approved (exit 0: no false alarm), and each damaged build must be
blocked (exit 1) under the file as under the packaged defaults. Prints one line per
session and the counts; exits 0 when both hold, 1 otherwise. Runs every ``gate run`` in
this process (the model libraries are imported once).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time

from gate.cli import main as gate

DAMAGED = ("bnb-nf4", "quanto-int2", "prune-magnitude:0.5", "drop-layers:2")


def _gate(*args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return gate(
            ["run", "--candidate", "demo", "--against", "fp32", "--tiers", "fidelity", *args]
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("thresholds")
    parser.add_argument("--reruns", type=int, default=20)
    parser.add_argument("--first", type=int, default=1, help="number of the first rerun")
    parser.add_argument("--recipe", action="append", dest="recipes")
    args = parser.parse_args()
    alarms = 0
    for i in range(args.first, args.first + args.reruns):
        start = time.perf_counter()
        code = _gate("--thresholds", args.thresholds)
        print(f"rerun {i}: exit {code} ({time.perf_counter() - start:.0f} s)", flush=True)
        alarms += code != 0
    print(f"false alarms: {alarms} of {args.reruns} reruns of the unmodified model", flush=True)
    missed = 0
    recipes = args.recipes or list(DAMAGED)
    for recipe in recipes:
        calibrated = _gate("--recipe", recipe, "--thresholds", args.thresholds)
        default = _gate("--recipe", recipe)
        print(f"{recipe}: exit {calibrated} calibrated, {default} default thresholds", flush=True)
        missed += default == 1 and calibrated != 1
    print(f"builds the defaults block that the calibrated file lets through: {missed}")
    return 0 if alarms == 0 and missed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
