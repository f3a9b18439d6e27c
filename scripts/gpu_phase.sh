#!/usr/bin/env bash
# The polling-phase experiment (docs/probes.md, "The polling phase"): the ping-pong's phase sweep
# and the hand-off suite with the spin reading the error word every read (CHECK_EVERY=1) and every
# 8th read (8), each in its own process and Triton cache. STEPS: "phase handoff kernels".
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/device.txt" 2>&1; head -2 "$OUT/device.txt"
rc=0
for step in ${STEPS:-phase handoff}; do
  for c in ${CHECKS:-1 8}; do
    export KTRACE_WAIT_CHECK_EVERY=$c TRITON_CACHE_DIR=/tmp/triton_c$c
    case $step in
      phase) timeout 200 python3 benchmarks/probe_overhead.py --suite phase --reps "${PHASE_REPS:-15}" --json "$OUT/phase_c$c.json" > "$OUT/phase_c$c.log" 2>&1 || rc=1 ;;
      handoff) timeout 280 python3 benchmarks/probe_overhead.py --suite handoff --reps "${REPS:-30}" --json "$OUT/handoff_c$c.json" > "$OUT/handoff_c$c.log" 2>&1 || rc=1 ;;
      kernels) timeout 250 python3 -m ktrace.testing.launch -n 1 --timeout 240 -- python3 benchmarks/kernels.py \
                 --kernels ${KERNELS:-all_reduce all_to_all} --json "$OUT/kernels_c$c.json" > "$OUT/kernels_c$c.log" 2>&1 || rc=1 ;;
    esac
    echo "$step c=$c done t=$(el) rc=$rc"
  done
done
for f in "$OUT"/*.log; do echo "== $f"; grep -v "^\s*$" "$f" | tail -n 45; done
exit $rc
