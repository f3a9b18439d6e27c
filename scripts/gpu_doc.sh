#!/usr/bin/env bash
# One call on TWO GPUs after the report document, the format registry and the launcher's move to
# ktrace.launch: the GPU tier's warm-up and CUDA-graph tests (they read the report through
# report_json / rep.summary), the multi-GPU tests started by the launcher under its new name and
# under its former one (ktrace.testing.launch), and `ktrace run` (the launcher as it starts ranks)
# with its report. About 8 minutes.
#     OUT=out bash scripts/gpu_doc.sh
# Logs go to $OUT/logs/<step>.log, packed into $OUT/logs.tgz; the last line names failed steps.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
STEP_GREP="passed|failed|error|Error|Traceback|PASSED|FAILED|verdict|Nothing is wrong|cause"; TAIL=6
source "$(dirname "$0")/_gpu_prelude.sh"
step gpu 240 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu/test_warmup_gpu.py tests/gpu/test_graphs_gpu.py
step multi:new 150 python3 -m ktrace.launch -n 2 --timeout 140 -- python3 -m pytest -m multigpu tests/multigpu/test_capture_faults.py -q -p no:cacheprovider -rfE
step multi:former 100 python3 -m ktrace.testing.launch -n 2 --timeout 90 -- python3 -m pytest -m multigpu tests/multigpu/test_shmem_multigpu.py -q -p no:cacheprovider -rfE
step run 150 python3 -m ktrace.cli run all_to_all --nproc 2 --timeout 120 --out "$L/run"
find "$L" -name "*.pftrace" -delete 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
if [ ${#failed[@]} -eq 0 ]; then echo "GPU DOC CHECKS: ALL STEPS PASSED"; else echo "GPU DOC CHECKS FAILED: ${failed[*]}"; exit 1; fi
