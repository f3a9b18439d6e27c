#!/usr/bin/env bash
# `ktrace run` and the examples on 4 GPUs, each step with its own limit; logs bundled.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT/logs"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L="$OUT/logs"
step() { local name=$1 lim=$2; shift 2; echo "=== $name"; local t0=$SECONDS
  timeout --kill-after=10 "$lim" "$@" > "$L/$name.log" 2>&1; local rc=$?
  echo "=== $name rc=$rc $((SECONDS - t0))s"; tail -n ${TAIL:-5} "$L/$name.log"; }
step ktrace_run 120 python3 -m ktrace.cli run all_to_all --nproc 4 --out "$L/run"
step example01 45 python3 examples/01_trace_a_single_gpu_kernel.py --out "$L/ex01"
step example04 80 python3 examples/04_find_a_deadlock.py --nproc 4 --out "$L/ex04"
step example02 80 python3 examples/02_all_to_all_stalls.py --nproc 4 --out "$L/ex02"
step example05 100 python3 examples/05_before_after_diff.py --nproc 4 --out "$L/ex05"
find "$L" \( -name "*.pftrace" -o -name "*.json.gz" -o -name "*.html" \) -delete 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
