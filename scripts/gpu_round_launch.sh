#!/usr/bin/env bash
# Launch alignment, densities and the multi-GPU tier at every world size, on one host of 4 GPUs
# (H100 or H200), most important first, each step under its own time limit and all of them under
# one budget (BUDGET seconds, default 540: a step gets at most what is left; one with less than
# 20 s left is skipped and named at the end):
#   run     `ktrace run K --nproc 4` for every kernel (default shapes), then run:check reads each
#           run.json and report.json: the start skew of the launches the device barrier released
#           (< 10 µs), no barrier round that missed a rank, no finding blaming a late launch, every
#           wait's release recorded (no wait left to the probe density)
#   tier4   the multi-GPU tier at 4 ranks through the launcher (tests/multigpu tests/kernels);
#           each rank's pytest counts on its line
#   tier21  the tier at 2 ranks (GPUs 0,1) and at 1 rank (GPU 2), both at once
#   bench   benchmarks/kernels.py at 4 ranks on one case per kernel (two for all_reduce and
#           gemm_all_scatter): ktrace/baseline and traced/untraced, paired per repetition
#   noalign (not by default) `ktrace run all_to_all --nproc 4 --no-align`: the skew a host barrier leaves
#   self    (not by default) the tests that start their own ranks (a dying rank, the hand-off
#           scenarios) at 2 and at 4 ranks
# Estimated on 4 x H100 (not yet timed): run 6 x 30-50 s, tier4 150-240 s, tier21 150-240 s,
# bench 60-120 s: all four may not fit one budget; then run STEPS="run bench" and
# STEPS="tier4 tier21" as two calls.
#     OUT=out bash scripts/gpu_round_launch.sh            STEPS="run bench" OUT=out bash scripts/gpu_round_launch.sh
# Logs: $OUT/logs/<step>.log (the ranks' own logs in $OUT/logs/<step>/), the runs in
# $OUT/logs/run_<kernel>/ (capture, run.json, report JSON), the benchmark rows in $OUT/bench_n4.json.
# The last line names the steps that failed; the exit status is non-zero if any did.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
STEPS=${STEPS:-"run tier4 tier21 bench"}
BUDGET=${BUDGET:-540}
KERNELS=${KERNELS:-"all_to_all all_reduce gemm_all_scatter ag_gemm gemm_rs gluon_gemm"}
STEP_GREP="Start skew|released by|queued behind|launched late|rank [0-9]+: |ALL RANKS|FAILED|RUN CHECK|^\[rank 0\] \||passed|failed"
TAIL=${TAIL:-14}
source "$(dirname "$0")/_gpu_prelude.sh"
PYT="python3 -m pytest -q -p no:cacheprovider -rfE"

bstep() {  # bstep NAME LIMIT_S CMD...: `step`, its limit cut to what is left of BUDGET
  local name=$1 lim=$2; shift 2
  case " $STEPS " in *" ${name%%:*} "*) ;; *) return ;; esac
  local left=$((BUDGET - SECONDS - 5))
  if [ "$left" -lt 20 ]; then echo "=== $name: skipped, ${left} s left of the ${BUDGET} s budget"; failed+=("$name(no time)"); return; fi
  [ "$lim" -gt "$left" ] && lim=$left
  step "$name" "$lim" "$@"
}

# what run:check asserts of each kernel's run (see the header)
cat > "$L/run_check.py" <<'EOF'
import json, pathlib, sys

L, bad = pathlib.Path(sys.argv[1]), []
for k in sys.argv[2:]:
    d = L / f"run_{k}"
    try:
        info = json.loads((d / "run.json").read_text())
        rep = json.loads((d / f"{k}.report.json").read_text())
    except (OSError, ValueError) as e:
        print(f"{k}: no run.json / report ({e})")
        bad.append(f"{k}: not recorded")
        continue
    la, rows, s = info.get("launch_alignment") or {}, info.get("start_skew") or [], rep["summary"]
    rel = [r["max_ns"] for r in rows if r["released"] == "device barrier"]
    late = [f["text"] for f in rep["findings"] if f["kind"] == "late_launch"]
    missed = sum((la.get("missed") or {}).values())
    unrel = s["waits_unreleased"] + s.get("waits_notify_untraced", 0) + s.get("waits_release_untraced", 0)
    device = info.get("ranks", {}).get("0", {}).get("device")
    print(f"{k} ({device} x {info.get('world_size')}): " + "; ".join(
        f"{r['kernel']} {r['released']}: skew max {r['max_ns'] / 1e3:.1f} us, median {r['median_ns'] / 1e3:.1f} us, "
        f"rank {r['last_rank']} last" for r in rows))
    first = rep["findings"][0]["text"][:200] if rep["findings"] else None
    print(f"    rounds released by the hold (host late to open its gate) per rank {la.get('released_by_hold')}, "
          f"missed {missed}; late_launch findings {len(late)}; waits {s['waits']}, without a recorded release {unrel}; "
          f"first finding: {first}")
    if la.get("method") != "device barrier":
        bad.append(f"{k}: released by {la.get('method')}")
    if not rel or max(rel) >= 10_000:
        bad.append(f"{k}: start skew {max(rel) if rel else None} ns")
    if missed:
        bad.append(f"{k}: {missed} barrier rounds missed a rank")
    if late:
        bad.append(f"{k}: {late[0][:120]}")
    if unrel:
        bad.append(f"{k}: {unrel} waits without a recorded release")
print("RUN CHECK: " + ("ALL OK" if not bad else "FAILED: " + "; ".join(bad)))
sys.exit(1 if bad else 0)
EOF

# 1. ktrace run of every kernel at 4 ranks, released by the device barrier
for k in $KERNELS; do
  bstep "run:$k" "${RUN_LIMIT:-90}" python3 -m ktrace.cli run "$k" --nproc 4 --out "$L/run_$k" --timeout 80
done
bstep run:check 60 python3 "$L/run_check.py" "$L" $KERNELS
find "$L" -name "*.pftrace" -delete 2>/dev/null; find "$L" -name "*.report.html" -delete 2>/dev/null

# (not by default) the same kernel released by a host barrier: the skew the device barrier removes
bstep noalign 90 python3 -m ktrace.cli run all_to_all --nproc 4 --out "$L/run_noalign" --timeout 80 --no-align

# 2. the multi-GPU tier at 4 ranks
bstep tier4 "${TIER_LIMIT:-300}" python3 -m ktrace.testing.launch -n 4 --timeout 280 --log-dir "$L/tier4" -- \
  $PYT -m multigpu tests/multigpu tests/kernels

# 3. at 2 ranks (GPUs 0, 1) and at 1 rank (GPU 2), at once
tiers21() {  # tiers21 LIMIT_S
  CUDA_VISIBLE_DEVICES=0,1 timeout --kill-after=10 "$1" python3 -m ktrace.testing.launch -n 2 --timeout "$1" \
    --log-dir "$L/tier2" -- $PYT -m multigpu tests/multigpu tests/kernels > "$L/tier2.out" 2>&1 & local p2=$!
  CUDA_VISIBLE_DEVICES=2 timeout --kill-after=10 "$1" python3 -m ktrace.testing.launch -n 1 --timeout "$1" \
    --log-dir "$L/tier1" -- $PYT -m multigpu tests/multigpu tests/kernels > "$L/tier1.out" 2>&1 & local p1=$!
  wait $p2; local r2=$?; wait $p1; local r1=$?
  echo "--- 2 ranks (GPUs 0,1): exit $r2"; grep -E "rank [0-9]+: |ALL RANKS|FAILED" "$L/tier2.out" | tail -n 4
  echo "--- 1 rank (GPU 2): exit $r1"; grep -E "rank [0-9]+: |ALL RANKS|FAILED" "$L/tier1.out" | tail -n 3
  return $(( r2 != 0 || r1 != 0 ))
}
export -f tiers21; export L PYT
bstep tier21 "${TIER_LIMIT:-300}" bash -c "tiers21 $(( ${TIER_LIMIT:-300} - 20 ))"

# 4. every kernel against torch/NCCL at 4 ranks
BENCH_CASES=${BENCH_CASES:-"one_shot_push-65536B two_shot-16777216B gpumode 4096x14336x4096 4096x4096x14336 8192x4096x7168/fused_sequential 8192x4096x7168/fused_ws"}
bstep bench "${BENCH_LIMIT:-180}" python3 -m ktrace.testing.launch -n 4 --timeout 170 --log-dir "$L/bench" -- \
  python3 benchmarks/kernels.py --kernels all_to_all all_reduce gemm_all_scatter ag_gemm gemm_rs --exact --cases $BENCH_CASES \
  --json "$OUT/bench_n4.json"
[ -f "$L/bench.log" ] && grep -E "^\[rank 0\] (#|\|)" "$L/bench.log" | sed 's/^\[rank 0\] //'

# (not by default) the tests that start their own ranks, at 2 and 4 ranks
for n in 2 4; do
  KTRACE_TEST_NPROC=$n bstep "self:n$n" 240 $PYT -m multigpu tests/multigpu/test_rank_death.py tests/multigpu/test_handoff_scenarios.py
done

tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
if [ ${#failed[@]} -eq 0 ]; then echo "GPU ROUND LAUNCH: ALL STEPS PASSED ($SECONDS s)"; else echo "GPU ROUND LAUNCH FAILED: ${failed[*]} ($SECONDS s)"; exit 1; fi
