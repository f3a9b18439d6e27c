#!/bin/bash
# `ktrace run gluon_gemm` end to end on one GPU (both variants, the loader slowed in the first).
# Usage (from the repository root): bash instrumented_kernels/gluon_gemm/gpu_run_cli.sh OUT_DIR
set -u
OUT=${1:?out dir}
timeout 150 python3 -m ktrace.cli run gluon_gemm -s M=512 -s N=512 -s K=1024 -s loader_delay_us=2 --out "$OUT/run_gemm" --timeout 140 2>&1 | tail -25
echo "rc=$?"
timeout 150 python3 -m ktrace.cli run gluon_gemm -s M=512 -s N=512 -s K=1024 -s variant=all_scatter --out "$OUT/run_scatter" --timeout 140 2>&1 | tail -25
echo "rc=$?"
ls -la "$OUT"/run_* | head -30
