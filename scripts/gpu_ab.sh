#!/usr/bin/env bash
# A/B of the ktrace library on one machine: each step runs with an earlier ktrace package (AB_OLD,
# a folder holding ktrace/, e.g. `git archive REV ktrace | tar -x -C .ab/old`, carried with the
# call) and with this checkout's, alternating old, new, old, new (AB_ROUNDS rounds), everything
# else (benchmarks, kernels) this checkout's. Steps (STEPS): small1 (probe_overhead --suite small,
# one GPU), handoff1 (--suite handoff --quick, one rank), kernels1 (benchmarks/kernels.py at one
# rank: CASES1), handoff2, a2a2, kernels2 (two ranks: CASES2); the hand-off steps take
# HANDOFF_ARGS (default --quick) under HANDOFF_LIMIT seconds, the launcher LAUNCH_LIMIT. Logs and
# JSON in $OUT/logs (one archive back), a summary of every ratio in $OUT/summary.txt.
#     AB_OLD=.ab/old STEPS="small1 kernels1" OUT=out bash scripts/gpu_ab.sh
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
STEPS=${STEPS:-"small1 handoff1 kernels1"}
OLD=$(cd "${AB_OLD:-.ab/old}" && pwd) || { echo "AB_OLD: no such folder"; exit 2; }
[ -d "$OLD/ktrace" ] || { echo "AB_OLD ($OLD) holds no ktrace/"; exit 2; }
ROUNDS=${AB_ROUNDS:-1}
CASES1=${CASES1:-"4096B 65536B 1048576B gpumode"}
CASES2=${CASES2:-"4096B 65536B 1048576B gpumode"}
HANDOFF_ARGS=${HANDOFF_ARGS:-"--quick"}  # e.g. "--parts pipeline --shapes 8x65536,32x8192"
STEP_GREP="passed|failed|Error|device:"; TAIL=${TAIL:-2}
source "$(dirname "$0")/_gpu_prelude.sh"
BASE=$PYTHONPATH
P=benchmarks/probe_overhead.py
N1="python3 -m ktrace.testing.launch -n 1 --timeout ${LAUNCH_LIMIT:-170}"
N2="python3 -m ktrace.testing.launch -n 2 --timeout ${LAUNCH_LIMIT:-170}"
run_side() {  # run_side STEP SIDE TAG
  local s=$1 side=$2 tag=$3 j="$L/$1_$3.json"
  if [ "$side" = old ]; then export PYTHONPATH=$OLD:$BASE; else export PYTHONPATH=$BASE; fi
  case $s in
    small1) step "$s:$tag" 90 python3 $P --suite small --reps "${SMALL_REPS:-100}" --json "$j" ;;
    handoff1) step "$s:$tag" ${HANDOFF_LIMIT:-180} python3 $P --suite handoff $HANDOFF_ARGS --reps "${REPS:-30}" --json "$j" ;;
    kernels1) step "$s:$tag" 180 $N1 -- python3 benchmarks/kernels.py --kernels all_reduce all_to_all --cases $CASES1 --json "$j" ;;
    handoff2) step "$s:$tag" ${HANDOFF_LIMIT:-180} $N2 -- python3 $P --suite handoff $HANDOFF_ARGS --reps "${REPS:-30}" --json "$j" ;;
    a2a2) step "$s:$tag" 120 $N2 -- python3 $P --suite a2a --reps "${A2A_REPS:-40}" --json "$j" ;;
    kernels2) step "$s:$tag" 180 $N2 -- python3 benchmarks/kernels.py --kernels all_reduce all_to_all --cases $CASES2 --json "$j" ;;
  esac
  export PYTHONPATH=$BASE
}
for s in $STEPS; do
  for r in $(seq 1 "$ROUNDS"); do run_side "$s" old "old$r"; run_side "$s" new "new$r"; done
done
python3 - "$L" > "$OUT/summary.txt" <<'EOF'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    d = json.loads(f.read_text())
    print(f"== {f.stem}  {d.get('device')} x {d.get('world_size', 1)}")
    for r in d.get("rows", []):
        if "ratio" in r:  # probe_overhead rows
            print(f"  {r['case'][:34]:<34} {r['variant'][:34]:<34} {r['ratio']:.4f} {r.get('extra_ns_per_handoff', float('nan')):+8.1f} ns")
        elif "traced_ratio" in r:  # benchmarks/kernels.py rows
            print(f"  {r['kernel']:<12} {r['case'][:30]:<30} untraced {r['us']['ktrace']:9.2f} us  traced {r['traced_ratio']:.4f}"
                  f" ({r['traced_ratio_p10']:.4f}-{r['traced_ratio_p90']:.4f})  ring {r.get('ring_ratio', float('nan')):.4f}")
        elif "error" in r:
            print(f"  {r.get('kernel')} {r.get('case')}: ERROR {r['error']}")
EOF
tar -czf "$OUT/logs.tgz" -C "$OUT" logs
cat "$OUT/summary.txt"
if [ ${#failed[@]} -eq 0 ]; then echo "A/B: ALL STEPS PASSED"; else echo "A/B FAILED: ${failed[*]}"; exit 1; fi
