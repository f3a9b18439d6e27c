#!/bin/bash
# One device run: checks + benchmark + captures, then memcheck on the small cases.
# Usage (from the repository root): bash instrumented_kernels/gluon_gemm/gpu_run.sh OUT_DIR
# (GLUON_STEPS=probes,gemm,bench picks steps; GLUON_BEFORE=module also times an earlier copy of
# kernel.py, traced, in the benchmark; GLUON_ATTRIBUTE=1 also times the default density recorded
# in one partition at a time; GLUON_BENCH_BATCH=N times N launches between a callable's events;
# memcheck runs the small traced cases unless GLUON_MEMCHECK=0)
set -u
OUT=${1:?out dir}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# one rank (the flag kernel's symmetric heap: peer = itself)
export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 GLUON_BENCH_REPS=${GLUON_BENCH_REPS:-300}
timeout 240 python3 -m instrumented_kernels.gluon_gemm.gpu_checks "$OUT" 2>&1 | tail -150
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ "${GLUON_MEMCHECK:-1}" = 0 ]; then
  echo "memcheck skipped (GLUON_MEMCHECK=0)"
elif [ -n "$CS" ]; then
  timeout 140 "$CS" --tool memcheck --print-limit 20 python3 -m instrumented_kernels.gluon_gemm.gpu_checks "$OUT/mc" --memcheck > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; tail -5 "$OUT/memcheck.log"
else
  echo "no compute-sanitizer"
fi
