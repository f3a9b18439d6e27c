#!/usr/bin/env bash
# GEMM + communication kernels (gemm_all_scatter, ag_gemm, gemm_rs) on the GPUs of this host:
# their multi-GPU tests at 2 and 4 ranks (those the host has), then their benchmark cases at
# BENCH_N ranks (default: 4 if present, else every GPU). Logs and JSON go to $OUT (default ./out).
# Run from the repository root on a GPU machine.
#   REPS=30 BENCH_N=4 CASES="8192x3584" bash scripts/gpu_gemm.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
NGPU=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/gemm_device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gemm_device.txt"
TESTS="tests/kernels/test_gemm_all_scatter_multigpu.py tests/kernels/test_ag_gemm_multigpu.py tests/kernels/test_gemm_rs_multigpu.py"
rc=0
for n in ${TEST_NS:-2 4}; do
  if [ "$n" -gt "$NGPU" ]; then echo "skipping the $n-rank tests: $NGPU GPU(s)"; continue; fi
  python3 -m ktrace.testing.launch -n "$n" --timeout 900 -- python3 -m pytest -m multigpu $TESTS -q -p no:cacheprovider -rfE \
    2>&1 | tee "$OUT/gemm_tests_n$n.log" || rc=1
done
BN=${BENCH_N:-$(( NGPU >= 4 ? 4 : NGPU ))}
ARGS=(--kernels gemm_all_scatter ag_gemm gemm_rs --json "$OUT/gemm_bench_n$BN.json")
[ -n "${REPS:-}" ] && ARGS+=(--reps "$REPS")
[ -n "${CASES:-}" ] && ARGS+=(--cases $CASES)
python3 -m ktrace.testing.launch -n "$BN" --timeout 1500 -- python3 benchmarks/kernels.py "${ARGS[@]}" \
  2>&1 | tee "$OUT/gemm_bench_n$BN.log" || rc=1
exit $rc
