#!/usr/bin/env bash
# Symmetric heap on the GPUs of this host: its multi-GPU tier at 2 and 4 ranks (those the host
# has), then benchmarks/p2p.py on BENCH_N ranks (default: every GPU, at most 4). Logs and JSON go
# to $OUT (default ./out). Run from the repository root on a GPU machine.
#   TEST_NS="2 4" BENCH_N=4 SIZES="0.0625 1 16 64 256" bash scripts/gpu_multigpu.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
NGPU=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/shmem_device.txt"
nvidia-smi topo -m 2>/dev/null | tee -a "$OUT/shmem_device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/shmem_device.txt"
rc=0
for n in ${TEST_NS:-2 4}; do
  if [ "$n" -gt "$NGPU" ]; then echo "skipping the $n-rank tests: $NGPU GPU(s)"; continue; fi
  python3 -m ktrace.testing.launch -n "$n" --timeout "${TEST_TIMEOUT:-600}" --log-dir "$OUT/shmem_tests_n$n" -- \
    python3 -m pytest -m multigpu tests/multigpu/test_shmem_multigpu.py -q -p no:cacheprovider -rfE -s \
    2>&1 | tee "$OUT/shmem_tests_n$n.log" || rc=1
done
BN=${BENCH_N:-$(( NGPU >= 4 ? 4 : NGPU ))}
python3 benchmarks/p2p.py -n "$BN" --sizes-mib ${SIZES:-0.0625 1 16 64 256} --json "$OUT/p2p_n$BN.json" \
  2>&1 | tee "$OUT/p2p_n$BN.log" || rc=1
exit $rc
