#!/usr/bin/env bash
# Everything GPU-side in two parts on one 4-GPU machine, logs bundled for the trip back.
#   PART=1: foundation GPU tier + probe overhead; multi-GPU tier (heap, alignment) at 4 ranks;
#           the real kernel captures used by the analysis tests and the demo.
#   PART=2: kernel tests at 4 ranks, kernel benchmarks at 4 ranks, multi-GPU tier at 2 ranks.
# Each step has its own time limit; a failing step does not stop the others.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L="$OUT/logs"
step() { local name=$1 lim=$2; shift 2; echo "=== $name"; local t0=$SECONDS
  timeout --kill-after=10 "$lim" "$@" > "$L/$name.log" 2>&1; local rc=$?
  echo "=== $name rc=$rc $((SECONDS - t0))s"; tail -n ${TAIL:-6} "$L/$name.log"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > "$L/device.txt"; nvidia-smi topo -m >> "$L/device.txt" 2>&1
if [ "${PART:-1}" = 1 ]; then
  step foundation 200 env OUT="$L/foundation" REPS=200 bash scripts/gpu_foundation.sh
  step multigpu_n4 200 python3 -m ktrace.testing.launch -n 4 --timeout 180 -- python3 -m pytest -m multigpu tests/multigpu -q -p no:cacheprovider -rfE -s
  step captures 150 python3 -m ktrace.testing.launch -n 4 --timeout 140 -- python3 -m tests.fixtures.make_kernel_captures "$OUT/captures"
  tar -czf "$OUT/captures.tgz" -C "$OUT" captures 2>/dev/null; rm -rf "$OUT/captures"
else
  step kernels_n4 240 python3 -m ktrace.testing.launch -n 4 --timeout 230 -- python3 -m pytest -m multigpu tests/kernels -q -p no:cacheprovider -rfE
  step kernels_bench_n4 240 python3 -m ktrace.testing.launch -n 4 --timeout 230 -- python3 benchmarks/kernels.py --json "$L/kernels_n4.json"
  step multigpu_n2 100 python3 -m ktrace.testing.launch -n 2 --timeout 90 -- python3 -m pytest -m multigpu tests/multigpu -q -p no:cacheprovider -rfE -s
fi
tar -czf "$OUT/logs_part${PART:-1}.tgz" -C "$OUT" logs && rm -rf "$L"
