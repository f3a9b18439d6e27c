#!/usr/bin/env bash
# The GPU steps left open by issues 35, 38, 40 and 41, packed for a machine of TWO GPUs in calls
# of under 10 minutes each: in each call two lanes run at once, one per GPU (CUDA_VISIBLE_DEVICES),
# one process per GPU so that no timed step shares its GPU, then the steps that need both GPUs
# (CALL=2 on one GPU: the two lanes one after the other, the steps at 2 ranks skipped).
#     CALL=1 OUT=out bash scripts/gpu_session_x2.sh   # GPU tier | byok at 1 rank; byok at 2 ranks
#     CALL=2 OUT=out bash scripts/gpu_session_x2.sh   # CUDA graphs | the rest of the tier, byok cost, --verify; at 2 ranks
#     CALL=3 OUT=out bash scripts/gpu_session_x2.sh   # one GPU: graphs, record, bench again; --verify of the rest
#     CALL=4 OUT=out bash scripts/gpu_session_x2.sh   # two GPUs: the multi-GPU tier, graphs and bench at 2 ranks
# Every step has its own time limit. Logs: $OUT/logs/<step>.log, each lane's output in
# $OUT/logs/lane<A|B>.out; byok captures in $OUT/logs/byok; all packed into $OUT/logs.tgz. The
# last line names the steps that failed.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; B="$L/byok"; mkdir -p "$L" "$B"
CALL=${CALL:-1}
STEPS=${STEPS:-"gpu graphs rec1 rec2 cli ex00 bench check ex08 gbench run1 run2 scen1 scen2 gmulti table tier2"}
STEP_GREP="passed|failed|error|Error|Traceback|FAILED|verdict|Nothing is wrong|first finding|ratio|predicted|within|skew"; TAIL=8
source "$(dirname "$0")/_gpu_prelude.sh"
K="python3 -m ktrace.cli"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
lanes() {  # lanes FN_A FN_B: FN_A on GPU 0 and FN_B on GPU 1 at once; their failures join `failed`
  (export CUDA_VISIBLE_DEVICES=0; "$1"; echo "${failed[*]}" > "$L/laneA.failed") > "$L/laneA.out" 2>&1 &
  local a=$!
  (export CUDA_VISIBLE_DEVICES=1; "$2"; echo "${failed[*]}" > "$L/laneB.failed") > "$L/laneB.out" 2>&1 &
  local b=$!
  wait $a $b
  echo "--- lane A (GPU 0)"; cat "$L/laneA.out"; echo "--- lane B (GPU 1)"; cat "$L/laneB.out"
  local f; for f in "$L"/lane?.failed; do read -r -a more < "$f" || true; failed+=("${more[@]}"); rm -f "$f"; done
}
pack() { find "$L" -name "*.pftrace" -delete 2>/dev/null; tar -czf "$OUT/logs.tgz" -C "$OUT" logs; }

if [ "$CALL" = 1 ]; then
  call1_a() {  # the whole GPU tier (probes, Gluon, graphs, warm-up, injection, flight recorder)
    step gpu 330 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu
  }
  call1_b() {  # bring your own kernel at one rank: the rings, ktrace record, example 00, the cost
    step rec1 120 python3 -m tests.byok.scenario --style plain,asm,iris --fault none,straggler,skip --out "$B"
    step cli:asm1 90 $K record -o "$L/rec_asm1" --declare tests/byok/ring_asm.json -- \
      python3 -m tests.byok.scenario --style asm --fault none
    step ex00:plain 60 python3 examples/00_bring_your_own_kernel.py
    step bench:1 100 python3 -m tests.byok.scenario --style plain,asm,iris --bench 60 --out "$B"
  }
  lanes call1_a call1_b; pack
  step rec2 130 torchrun --standalone --nproc-per-node 2 -m tests.byok.scenario --style plain,asm,iris \
    --fault none,straggler,skip --out "$B"; pack
  step cli:ex00 100 $K record -o "$L/rec_ex00" -- torchrun --standalone --nproc-per-node 2 \
    examples/00_bring_your_own_kernel.py --slow-rank 1; pack
  step check 60 python3 -m tests.byok.check "$B"; pack
fi

if [ "$CALL" = 2 ]; then
  KS=${KS:-"all_to_all all_reduce"}
  call2_a() {  # CUDA graphs: the GPU tests (a process of their own), as a user runs them, their cost
    step graphs 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu/test_graphs_gpu.py
    step ex08 50 python3 examples/08_cuda_graph_replays.py --replays 200 --out "$L/example08"
    step gbench 70 python3 benchmarks/graphs.py --reps 100 --batch 20 --json "$L/graphs_bench.json"
  }
  call2_b() {  # the rest of the GPU tier; byok cost on the GPU; ktrace record at one rank; --verify at one rank
    step gpu 200 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu --ignore=tests/gpu/test_graphs_gpu.py
    step bench:1 60 python3 -m tests.byok.scenario --style plain,asm,iris --bench 60 --out "$B"
    if [ -f .diag/record_probe.py ]; then
      step cli:probe 60 $K record -o "$L/rec_probe" --declare tests/byok/ring_asm.json -- python3 .diag/record_probe.py --style asm
    fi
    step cli:ex00one 60 $K record -o "$L/rec_ex00one" -- python3 examples/00_bring_your_own_kernel.py
    local k; for k in $KS; do
      step "run1:$k" 100 $K run "$k" --nproc 1 --delay 0:20 --verify --steps 4 --out "$L/run1_$k" --timeout 90
    done
  }
  if [ "$NGPU" -ge 2 ]; then lanes call2_a call2_b; else CUDA_VISIBLE_DEVICES=0 call2_a; pack; CUDA_VISIBLE_DEVICES=0 call2_b; fi; pack
  [ "$NGPU" -ge 2 ] || { echo "=== the steps at 2 ranks skipped: $NGPU GPU"; STEPS=""; }
  step gmulti 90 python3 -m ktrace.testing.launch -n 2 --timeout 80 -- \
    python3 -m pytest -m multigpu tests/multigpu/test_graphs_multigpu.py -q -p no:cacheprovider -rfE; pack
  step bench:2 60 torchrun --standalone --nproc-per-node 2 -m tests.byok.scenario --style plain,asm,iris --bench 60 --out "$B"; pack
  for k in $KS; do
    step "run2:$k" 100 $K run "$k" --nproc 2 --delay 1:20 --verify --steps 4 --out "$L/run2_$k" --timeout 90; pack
  done
  step table 60 python3 scripts/cost_table.py "$L" "$L/cost_table.md"; pack
fi

if [ "$CALL" = 3 ]; then  # on one GPU (or more): what call 2 found broken, again; then --verify of the other kernels
  BUDGET=${BUDGET:-540}
  bstep() {  # step, skipped when less than its limit is left of BUDGET
    local name=$1 lim=$2
    if [ $((BUDGET - SECONDS)) -lt "$lim" ]; then echo "=== $name: skipped, $((BUDGET - SECONDS)) s left"; return; fi
    step "$@"; pack
  }
  export CUDA_VISIBLE_DEVICES=0
  bstep graphs 150 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu/test_graphs_gpu.py
  bstep cli:asm1 45 $K record -o "$L/rec_asm1" --declare tests/byok/ring_asm.json -- \
    python3 -m tests.byok.scenario --style asm --fault none,straggler
  bstep cli:skip1 45 $K record -o "$L/rec_iris1" --wait-timeout-ms 20 -- python3 -m tests.byok.scenario --style iris --fault skip
  bstep bench:1 40 python3 -m tests.byok.scenario --style plain,asm,iris --bench 60 --out "$B"
  bstep run1:all_reduce 60 $K run all_reduce --nproc 1 --delay 0:20 --verify --steps 4 --out "$L/run1_all_reduce" --timeout 55
  for k in ${KS:-gemm_all_scatter ag_gemm gemm_rs gluon_gemm}; do
    bstep "run1:$k" 80 $K run "$k" --nproc 1 --delay 0:20 --verify --steps 4 --out "$L/run1_$k" --timeout 75
  done
  bstep scen1 200 python3 -m ktrace.testing.launch -n 1 --timeout 190 --log-dir "$L/scen1/logs" -- \
    python3 -m tests.fixtures.make_scenario_captures "$L/scen1" handoff_late_tiles handoff_heavy handoff_late_start --verify
  bstep table 30 python3 scripts/cost_table.py "$L" "$L/cost_table.md"
fi

if [ "$CALL" = 4 ]; then  # two GPUs: the multi-GPU tier (its CUDA-graph tests too), byok cost and --verify at 2 ranks
  BUDGET=${BUDGET:-520}
  bstep() {
    local name=$1 lim=$2
    if [ $((BUDGET - SECONDS)) -lt "$lim" ]; then echo "=== $name: skipped, $((BUDGET - SECONDS)) s left"; return; fi
    step "$@"; pack
  }
  bstep tier2 280 python3 -m ktrace.testing.launch -n 2 --timeout 270 --log-dir "$L/tier2" -- \
    python3 -m pytest -q -p no:cacheprovider -rfE -m multigpu tests/multigpu tests/kernels
  bstep bench:2 60 torchrun --standalone --nproc-per-node 2 -m tests.byok.scenario --style plain,asm,iris --bench 60 --out "$B"
  for k in ${KS:-ag_gemm all_reduce all_to_all}; do
    bstep "run2:$k" 60 $K run "$k" --nproc 2 --delay 1:20 --verify --steps 4 --out "$L/run2_$k" --timeout 55
  done
  bstep table 20 python3 scripts/cost_table.py "$L" "$L/cost_table.md"
fi

pack
if [ ${#failed[@]} -eq 0 ]; then echo "GPU SESSION CALL $CALL: ALL STEPS PASSED ($SECONDS s)"; else echo "GPU SESSION CALL $CALL FAILED: ${failed[*]} ($SECONDS s)"; exit 1; fi
