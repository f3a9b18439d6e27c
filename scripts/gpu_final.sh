#!/usr/bin/env bash
# One call on 4 GPUs, most important first, each step with its own limit:
# the real kernel captures, the multi-GPU tier at 4 ranks, `ktrace run`, the kernel tests at
# 4 ranks, the GPU examples. Logs are bundled into one file for the trip back.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L="$OUT/logs"
step() { local name=$1 lim=$2; shift 2; echo "=== $name"; local t0=$SECONDS
  timeout --kill-after=10 "$lim" "$@" > "$L/$name.log" 2>&1; local rc=$?
  echo "=== $name rc=$rc $((SECONDS - t0))s"; tail -n ${TAIL:-4} "$L/$name.log"; }
step captures 100 python3 -m ktrace.testing.launch -n 4 --timeout 95 -- python3 -m tests.fixtures.make_kernel_captures "$OUT/captures"
tar -czf "$OUT/captures.tgz" -C "$OUT" captures 2>/dev/null; rm -rf "$OUT/captures"
step multigpu_n4 70 python3 -m ktrace.testing.launch -n 4 --timeout 65 -- python3 -m pytest -m multigpu tests/multigpu/test_shmem_multigpu.py tests/multigpu/test_alignment.py -q -p no:cacheprovider -rfE -s
step ktrace_run 100 python3 -m ktrace.cli run all_to_all --nproc 4 --out "$L/run"
find "$L/run" -name "*.pftrace" -delete 2>/dev/null
step kernels_n4 160 python3 -m ktrace.testing.launch -n 4 --timeout 155 -- python3 -m pytest -m multigpu tests/kernels -q -p no:cacheprovider -rfE
step example01 45 python3 examples/01_trace_a_single_gpu_kernel.py --out "$L/ex01"
step example04 60 python3 examples/04_find_a_deadlock.py --nproc 4 --out "$L/ex04"
find "$L" -name "*.pftrace" -delete 2>/dev/null; find "$L" -name "*.json.gz" -delete 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
