#!/usr/bin/env bash
# The probes' cost and the report's predictions checked on the GPU (#40), on every GPU this machine
# has (world size from nvidia-smi -L): the delay-injection assembly check, the GPU tests of
# injection, then for every instrumented kernel `ktrace run --verify` at 1 rank and at 2 and 4
# ranks when there are that many GPUs (a rank's notifies delayed by the kernel's fault knob, so that
# the report has a cause to predict for; the cost is measured by default), the tile-pipeline and
# hand-off scenarios with --verify, and one table of all of it.
#     OUT=out bash scripts/gpu_cost.sh                     STEPS="ptx gpu run1" OUT=out bash scripts/gpu_cost.sh
# Each step is limited to 8 minutes (most take 1-3). Outputs: $OUT/cost_table.md (capture, ranks,
# probe cost, finding, injected delay, predicted, measured, spread, within?), $OUT/logs.tgz (logs,
# captures); the last line names the steps that failed.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
W=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
STEPS=${STEPS:-"ptx gpu run1 run2 run4 scen1 scen2 scenW table"}
KERNELS=${KERNELS:-"all_to_all all_reduce gemm_all_scatter ag_gemm gemm_rs gluon_gemm"}
DELAY_US=${DELAY_US:-20}
STEP_GREP="passed|failed|error|probes:|predicted|MISSES|within|Nothing is wrong"; TAIL=8
source "$(dirname "$0")/_gpu_prelude.sh"
echo "GPUs: $W"
step ptx 300 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_inject.py
step gpu 300 python3 -m pytest -q -s -p no:cacheprovider -rfE -m gpu tests/gpu/test_inject_gpu.py
for n in 1 2 4; do
  [ "$W" -ge "$n" ] || continue
  for k in $KERNELS; do  # the last rank delays each of its notifies (at 1 rank: its own consumers wait)
    step "run$n:$k" 480 python3 -m ktrace.cli run "$k" --nproc "$n" --delay "$((n - 1)):$DELAY_US" --verify --steps 4 \
      --out "$L/run${n}_$k" --timeout 420
  done
done
step scen1 480 python3 -m ktrace.testing.launch -n 1 --timeout 420 --log-dir "$L/scen1/logs" -- \
  python3 -m tests.fixtures.make_scenario_captures "$L/scen1" handoff_late_tiles handoff_heavy handoff_late_start --verify
[ "$W" -ge 2 ] && step scen2 480 python3 -m ktrace.testing.launch -n 2 --timeout 420 --log-dir "$L/scen2/logs" -- \
  python3 -m tests.fixtures.make_scenario_captures "$L/scen2" late_notifies late_launch heavy_workgroup --verify
[ "$W" -ge 4 ] && step scenW 480 python3 -m ktrace.testing.launch -n 4 --timeout 420 --log-dir "$L/scenW/logs" -- \
  python3 -m tests.fixtures.make_scenario_captures "$L/scenW" handoff_late_tiles handoff_heavy handoff_late_start --verify
step table 120 python3 scripts/cost_table.py "$L" "$OUT/cost_table.md"
cp "$OUT/cost_table.md" "$L/" 2>/dev/null
find "$L" -name "*.pftrace" -delete 2>/dev/null; find "$L" -name "*.html" -delete 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
if [ ${#failed[@]} -eq 0 ]; then echo "GPU COST: ALL STEPS PASSED"; else echo "GPU COST FAILED: ${failed[*]}"; exit 1; fi
