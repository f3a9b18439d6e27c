#!/usr/bin/env bash
# Multi-GPU tier of the instrumented kernels: their tests at 2 and 4 ranks (8 with NP8=1), then
# benchmarks/kernels.py on every GPU of the machine. Logs and JSON go to $OUT (default ./out).
# Run from the repository root on a machine with >= 4 GPUs (set NPS="2" on two).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NGPU=$(nvidia-smi -L | wc -l)
NPS=${NPS:-"2 4"}
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
rc=0
for n in $NPS; do
  if [ "$n" -gt "$NGPU" ]; then echo "skip -n $n: only $NGPU GPUs"; continue; fi
  python3 -m ktrace.testing.launch -n "$n" --timeout ${TEST_TIMEOUT:-900} -- \
    python3 -m pytest -m multigpu tests/kernels -q -p no:cacheprovider -rf ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 | tee "$OUT/kernels_tests_n$n.log" || rc=1
done
BN=${BENCH_N:-$NGPU}
python3 -m ktrace.testing.launch -n "$BN" --timeout ${BENCH_TIMEOUT:-1200} -- \
  python3 benchmarks/kernels.py ${BENCH_ARGS:-} --json "$OUT/kernels_n$BN.json" 2>&1 | tee "$OUT/kernels_bench_n$BN.log" || rc=1
exit $rc
