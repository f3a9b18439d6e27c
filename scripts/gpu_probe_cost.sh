#!/usr/bin/env bash
# Probe cost on 2 GPUs (and, in the same call, the one-rank suites that need no second GPU):
# benchmarks/probe_overhead.py's hand-off suite at 2 ranks (ping-pong over NVLink, the two-rank
# tile pipeline, the fan-in), the all-to-all with its controls (A2A_ARGS=--baseline adds
# all_to_all_single), the small-launch suite at 1 and 2 ranks, benchmarks/kernels.py at 2 ranks
# (the cases in CASES), the GPU tier and the multi-GPU tier of the traced waits and notifies; on
# request (STEPS) also diag2 (raw operations at the ping-pong's hand-off, 2 ranks), cost (cycles
# per probe, one GPU) and copy (the worst-case copy). Run from the repository root on 2 GPUs:
#     OUT=out bash scripts/gpu_probe_cost.sh         STEPS="small1 handoff2 kernels2" OUT=out bash ...
# Logs and JSON go to $OUT/logs (one archive back); the last line names the steps that failed.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
STEPS=${STEPS:-"small1 handoff2 a2a2 small2 kernels2 gpu multigpu"}
CASES=${CASES:-"4096B 65536B 1048576B gpumode 8192x4096x7168/producer_consumer 8192x4096x7168/fused_ws 4096x14336x4096 4096x4096x14336"}
REPS=${REPS:-30}
STEP_GREP="passed|failed|error|Error|device:|done"; TAIL=${TAIL:-4}
source "$(dirname "$0")/_gpu_prelude.sh"
nvidia-smi topo -m >> "$L/device.txt" 2>&1
N2="python3 -m ktrace.testing.launch -n 2 --timeout"
P=benchmarks/probe_overhead.py
step small1 ${SMALL_TIMEOUT:-90} python3 $P --suite small --reps "${SMALL_REPS:-100}" --json "$L/small1.json"
step handoff2 ${HANDOFF_TIMEOUT:-240} $N2 $(( ${HANDOFF_TIMEOUT:-240} - 10 )) -- python3 $P --suite handoff --reps "$REPS" --json "$L/handoff2.json"
# shellcheck disable=SC2086
step a2a2 ${A2A_TIMEOUT:-90} $N2 $(( ${A2A_TIMEOUT:-90} - 10 )) -- python3 $P --suite a2a --reps "${A2A_REPS:-40}" ${A2A_ARGS:-} --json "$L/a2a2.json"
step diag2 120 $N2 110 -- python3 $P --suite diag --reps "$REPS" --json "$L/diag2.json"
step cost 60 python3 $P --suite cost --json "$L/cost.json"
step copy 120 python3 $P --suite copy --no-proton --reps "${COPY_REPS:-100}" --json "$L/copy.json"
step small2 90 $N2 80 -- python3 $P --suite small --reps "${SMALL_REPS:-100}" --json "$L/small2.json"
# shellcheck disable=SC2086
step kernels2 ${KERNELS_TIMEOUT:-200} $N2 $(( ${KERNELS_TIMEOUT:-200} - 10 )) -- python3 benchmarks/kernels.py --cases $CASES --json "$L/kernels2.json"
step gpu 300 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu
step multigpu 120 $N2 110 -- python3 -m pytest -m multigpu tests/multigpu/test_shmem_multigpu.py -q -p no:cacheprovider -rfE
for f in "$L"/*.log; do echo "== $(basename "$f")"; grep -vE "^\s*$" "$f" | tail -n "${SHOW:-45}"; done > "$L/summary.txt"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && cp "$L/summary.txt" "$OUT/summary.txt"
if [ ${#failed[@]} -eq 0 ]; then echo "PROBE COST (2 GPUs): ALL STEPS PASSED"; else echo "PROBE COST (2 GPUs) FAILED: ${failed[*]}"; exit 1; fi
