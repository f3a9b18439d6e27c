#!/usr/bin/env bash
# Probe cost at one rank (one GPU, producer and consumer programs on it): the hand-off suite of
# benchmarks/probe_overhead.py (ping-pong, pipeline {8, 32} x {8K, 64K} fp32, fan-in; deferred
# records, the immediate ones side by side), the worst-case copy, and the GPU tier of the probes
# (compute-sanitizer memcheck included). Logs and JSON go to $OUT (default ./out).
# STEPS (default "handoff copy tests") picks steps; "diag": the ping-pong with raw operations at the hand-off;
# "phase": the ping-pong's polling-phase sweep; "kernels": benchmarks/kernels.py at 1 rank.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEPS=${STEPS:-"handoff copy tests"}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
rc=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  command -v ncu compute-sanitizer || ls /usr/local/cuda/bin 2>/dev/null | grep -E "ncu|sanitizer"; } > "$OUT/device.txt" 2>&1
head -2 "$OUT/device.txt"
for step in $STEPS; do
  case $step in
    handoff) timeout "${HANDOFF_TIMEOUT:-240}" python3 benchmarks/probe_overhead.py --suite handoff --reps "${REPS:-40}" \
               --json "$OUT/handoff1.json" > "$OUT/handoff1.log" 2>&1 || rc=1 ;;
    phase) timeout 150 python3 benchmarks/probe_overhead.py --suite phase --reps "${PHASE_REPS:-15}" \
             --json "$OUT/phase1.json" > "$OUT/phase1.log" 2>&1 || rc=1 ;;
    diag) timeout 120 python3 benchmarks/probe_overhead.py --suite diag --reps "${REPS:-40}" \
            --json "$OUT/diag1.json" > "$OUT/diag1.log" 2>&1 || rc=1 ;;
    copy) timeout 120 python3 benchmarks/probe_overhead.py --suite copy --no-proton --reps "${COPY_REPS:-100}" \
            --json "$OUT/copy.json" > "$OUT/copy.log" 2>&1 || rc=1 ;;
    tests) timeout 300 python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1 || rc=1 ;;
    kernels) timeout "${KERNELS_TIMEOUT:-200}" python3 -m ktrace.testing.launch -n 1 --timeout "$(( ${KERNELS_TIMEOUT:-200} - 10 ))" -- python3 benchmarks/kernels.py \
               --kernels ${KERNELS:-all_reduce all_to_all} --json "$OUT/kernels_n1.json" > "$OUT/kernels_n1.log" 2>&1 || rc=1 ;;
  esac
  echo "$step done t=$(el) rc=$rc"
done
for f in handoff1 phase1 diag1 copy gpu_tests kernels_n1; do [ -f "$OUT/$f.log" ] && { echo "== $f"; tail -n 60 "$OUT/$f.log"; }; done
exit $rc
