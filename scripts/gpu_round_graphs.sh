#!/usr/bin/env bash
# Traced kernels inside CUDA graphs (ktrace.graphs, docs/graphs.md) on GPUs, in one call.
#   OUT=out bash scripts/gpu_round_graphs.sh                    # 1 GPU: 5 minutes at most (limits 190+45+65 s)
#   STEPS="gpu example bench multi" OUT=out bash scripts/gpu_round_graphs.sh   # + 2 and 4 ranks (limits 2 x 85 s)
# Steps (each under its own time limit; logs in $OUT/logs/<step>.log, the last line names failures):
#   gpu     pytest -m gpu tests/gpu/test_graphs_gpu.py: the capture of issue 41 on the default capture
#           stream and on side streams; 200 replays = 200 launches with distinct increasing times;
#           ring overwrites counted exactly; tracing off leaves the graph node for node (on: +1, the
#           commit); a launch not warmed up runs untraced without breaking the capture; a full stage
#           arena (memset node); torch.compile(mode="reduce-overhead"); examples/08 at one rank with a
#           straggler in replays 50-59 (the report's first finding); the flight recorder's dump of a
#           replay that hangs (tests/gpu/graphs_gpu.py, in process groups of their own)
#   example examples/08 at one rank, as a user runs it
#   bench   benchmarks/graphs.py: traced vs untraced replays of the same graph, interleaved (table
#           for BENCHMARKS.md in the log, every figure in $OUT/graphs_bench.json)
#   multi   pytest -m multigpu tests/multigpu/test_graphs_multigpu.py at 2 ranks, then 4 (when the
#           machine has them): examples/08 replayed on every rank, paired, aligned, reported
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
STEPS=${STEPS:-"gpu example bench"}
STEP_GREP="passed|failed|error|FAILED|traced/untraced|\| |first finding|replays recorded"; TAIL=12
source "$(dirname "$0")/_gpu_prelude.sh"
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)

step gpu 190 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu/test_graphs_gpu.py
step example 45 python3 examples/08_cuda_graph_replays.py --replays 200 --out "$L/example08"
step bench 65 python3 benchmarks/graphs.py --reps 100 --batch 20 --json "$OUT/graphs_bench.json"
for n in 2 4; do
  [ "$NGPU" -ge "$n" ] || { echo "=== multi:n$n skipped: $NGPU GPU(s)"; continue; }
  step "multi:n$n" 85 python3 -m ktrace.testing.launch -n "$n" --timeout 75 -- \
    python3 -m pytest -m multigpu tests/multigpu/test_graphs_multigpu.py -q -p no:cacheprovider -rfE
done
find "$L" -name "*.pftrace" -delete 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
if [ ${#failed[@]} -eq 0 ]; then echo "GPU GRAPHS: ALL STEPS PASSED"; else echo "GPU GRAPHS FAILED: ${failed[*]}"; exit 1; fi
