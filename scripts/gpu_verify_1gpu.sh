#!/usr/bin/env bash
# One call on ONE GPU: the merged tree checked where it runs: the GPU tier (probes with deferred
# records and ring mode, the flight recorder's live dumps, the Gluon probes and GEMM), then
# `ktrace run` of every instrumented kernel at one rank (producer and consumer programs on one
# GPU), each checked against its reference, reported, and its capture kept for the CPU claim test.
#     OUT=out bash scripts/gpu_verify_1gpu.sh        STEPS="gpu run" OUT=out bash scripts/gpu_verify_1gpu.sh
# Logs go to $OUT/logs/<step>.log and come back as one archive with the run captures; the last
# line names the steps that failed.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L" "$OUT/captures"
STEPS=${STEPS:-"gpu run"}
KERNELS=${KERNELS:-"all_to_all all_reduce gemm_all_scatter ag_gemm gemm_rs gluon_gemm"}
STEP_GREP="passed|failed|error|Nothing is wrong|HANG|late|uneven|output check|rel"; TAIL=4
source "$(dirname "$0")/_gpu_prelude.sh"
step gpu 300 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu
for k in $KERNELS; do
  step "run:$k" 150 python3 -m ktrace.cli run "$k" --nproc 1 --out "$L/run_$k"
  cp "$L/run_$k"/*.ktrace "$OUT/captures/" 2>/dev/null
done
find "$L" -name "*.pftrace" -delete 2>/dev/null; find "$L" -name "*.html" -delete 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$OUT" logs captures && rm -rf "$L" "$OUT/captures"
if [ ${#failed[@]} -eq 0 ]; then echo "GPU VERIFY (1 GPU): ALL STEPS PASSED"; else echo "GPU VERIFY (1 GPU) FAILED: ${failed[*]}"; exit 1; fi
