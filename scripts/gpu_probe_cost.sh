#!/usr/bin/env bash
# Probe cost on hand-off-bound kernels, on 2 GPUs: the hand-off suite with its diagnostics, the
# all-to-all with controls, cycles per probe and the one-GPU ping-pong (benchmarks/probe_overhead.py),
# benchmarks/kernels.py at 2 ranks (the cases in CASES), the worst-case copy, and the GPU tier of
# the probes (compute-sanitizer memcheck included) and of the traced waits/notifies.
# Logs and JSON go to $OUT (default ./out). Run from the repository root on a machine with 2 GPUs.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CASES=${CASES:-"4096B 65536B 1048576B gpumode 8192x4096x7168/producer_consumer 8192x4096x7168/fused_ws 4096x14336x4096 4096x4096x14336"}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
L="python3 -m ktrace.testing.launch -n 2 --timeout"
rc=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$OUT/device.txt" 2>&1
$L 150 -- python3 benchmarks/probe_overhead.py --suite handoff,diag,a2a,cost,local --baseline --json "$OUT/handoff.json" > "$OUT/handoff.log" 2>&1 || rc=1
echo "handoff done t=$(el) rc=$rc"
# shellcheck disable=SC2086
$L ${KERNELS_TIMEOUT:-190} -- python3 benchmarks/kernels.py --cases $CASES --json "$OUT/kernels_n2.json" > "$OUT/kernels_n2.log" 2>&1 || rc=1
echo "kernels done t=$(el) rc=$rc"
python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1 || rc=1
echo "gpu tests done t=$(el) rc=$rc"
python3 benchmarks/probe_overhead.py --suite copy --no-proton > "$OUT/copy.log" 2>&1 || rc=1
echo "copy done t=$(el) rc=$rc"
$L 90 -- python3 -m pytest -m multigpu tests/multigpu/test_shmem_multigpu.py -q -p no:cacheprovider -k "wait or notify or missing or ring or held" > "$OUT/shmem_tests.log" 2>&1 || rc=1
echo "shmem tests done t=$(el) rc=$rc"
exit $rc
