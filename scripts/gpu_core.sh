#!/usr/bin/env bash
# One call on ONE GPU after the probe core, the session split and the benchmark suites' split:
# the GPU tier (probes with deferred records and ring mode, the Gluon probes, CUDA graphs, the
# flight recorder); the Gluon checks (the Gluon face now records through ktrace.language's
# functions: every lane's events and drop counts as expected, the heap flags paired); the three
# byok rings traced without edits at one rank (ktrace.auto.launch), judged by tests.byok.check;
# and every suite of benchmarks/probe_overhead.py once, briefly (its command line, now over
# benchmarks/probe_suites): the figures are not for BENCHMARKS.md, the runs check that each suite
# runs to its table. About 15 minutes.
#     OUT=out bash scripts/gpu_core.sh            STEPS="gpu gluon byok suite" (the default: all)
# Logs go to $OUT/logs/<step>.log, packed into $OUT/logs.tgz; the last line names failed steps.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
STEPS=${STEPS:-"gpu gluon byok suite"}
STEP_GREP="passed|failed|error|Error|Traceback|PASS|FAIL|check:|device:|done"; TAIL=6
source "$(dirname "$0")/_gpu_prelude.sh"
step gpu 300 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu
export GLUON_STEPS=probes,flags
step gluon 180 python3 -m instrumented_kernels.gluon_gemm.gpu_checks "$L/gluon"
unset GLUON_STEPS
step byok:rec 150 python3 -m tests.byok.scenario --style plain,asm,iris --fault none,straggler --out "$L/byok"
step byok:check 120 python3 -m tests.byok.check "$L/byok"
P=benchmarks/probe_overhead.py
step suite:copy 120 python3 $P --suite copy --no-proton --reps 20 --json "$L/copy.json"
step suite:handoff 240 python3 $P --suite handoff --quick --reps 5 --json "$L/handoff.json"
step suite:phase 200 python3 $P --suite phase --reps 2 --warmup 1 --json "$L/phase.json"
step suite:small,diag,notify 200 python3 $P --suite small,diag,notify --reps 5 --json "$L/small_diag_notify.json"
step suite:anatomy 200 python3 $P --suite anatomy --json "$L/anatomy.json"
step suite:local,cost 150 python3 $P --suite local,cost --reps 5 --json "$L/local_cost.json"
step suite:a2a 150 python3 -m ktrace.testing.launch -n 1 --timeout 140 -- python3 $P --suite a2a --reps 5 --json "$L/a2a.json"
find "$L" -name "*.pftrace" -delete 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
if [ ${#failed[@]} -eq 0 ]; then echo "GPU CORE CHECKS: ALL STEPS PASSED"; else echo "GPU CORE CHECKS FAILED: ${failed[*]}"; exit 1; fi
