#!/usr/bin/env bash
# One call on 2 GPUs of one host, most important first, each step under its own time limit: the
# GPU tier, the multi-GPU tier at 2 ranks (faults, clocks, heap), a rank that dies, the kernel
# tier at 2 ranks, `ktrace run` through torchrun, the kernels' traced/untraced benchmark.
#     OUT=out bash scripts/gpu_verify.sh           STEPS="gpu multigpu" OUT=out bash scripts/gpu_verify.sh
# Every step's output goes to $OUT/logs/<step>.log; the logs come back as one archive; the last
# line names the steps that failed (exit status non-zero if any did).
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
STEPS=${STEPS:-"gpu multigpu rank_death kernels run bench"}
source "$(dirname "$0")/_gpu_prelude.sh"
PYT="python3 -m pytest -q -p no:cacheprovider -rfE"
step gpu 100 $PYT -m gpu tests/gpu
step multigpu 200 python3 -m ktrace.testing.launch -n 2 --timeout 190 -- $PYT -m multigpu tests/multigpu -s
step rank_death 100 $PYT -m multigpu tests/multigpu/test_rank_death.py -s
step kernels 200 python3 -m ktrace.testing.launch -n 2 --timeout 190 -- $PYT -m multigpu tests/kernels
step run 150 python3 -m ktrace.cli run all_to_all --nproc 2 --out "$L/run_all_to_all"
find "$L" -name "*.pftrace" -delete 2>/dev/null
step bench 150 python3 -m ktrace.testing.launch -n 2 --timeout 140 -- python3 benchmarks/kernels.py --reps 20
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
if [ ${#failed[@]} -eq 0 ]; then echo "GPU VERIFY: ALL STEPS PASSED"; else echo "GPU VERIFY FAILED: ${failed[*]}"; exit 1; fi
