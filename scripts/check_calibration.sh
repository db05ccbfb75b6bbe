#!/usr/bin/env bash
# Check a calibrated thresholds file on the demo model (docs/adopting.md):
#   N reruns of the unmodified demo model gated with it must all pass (no false alarm),
#   and the damaged builds the default thresholds block must stay blocked.
# Usage: bash scripts/check_calibration.sh cal.toml [N] [RECIPE ...]
set -u
CAL=${1:?usage: check_calibration.sh CAL.toml [N] [RECIPE ...]}
N=${2:-20}
shift $(( $# >= 2 ? 2 : 1 ))
RECIPES=("$@")
[ ${#RECIPES[@]} -eq 0 ] && RECIPES=(bnb-nf4 quanto-int2 prune-magnitude:0.5 drop-layers:2)
GATE=${GATE:-gate}
alarms=0
for i in $(seq 1 "$N"); do
  $GATE run --candidate demo --against fp32 --tiers fidelity --thresholds "$CAL" >/dev/null 2>&1
  code=$?
  echo "rerun $i: exit $code"
  [ "$code" -ne 0 ] && alarms=$((alarms + 1))
done
echo "false alarms: $alarms of $N reruns of the unmodified model"
missed=0
for recipe in "${RECIPES[@]}"; do
  $GATE run --candidate demo --recipe "$recipe" --against fp32 --tiers fidelity --thresholds "$CAL" >/dev/null 2>&1
  code=$?
  echo "$recipe: exit $code"
  [ "$code" -ne 1 ] && missed=$((missed + 1))
done
echo "damaged builds not blocked: $missed of ${#RECIPES[@]}"
[ "$alarms" -eq 0 ] && [ "$missed" -eq 0 ]
