#!/usr/bin/env bash
# The newcomer's path on the GPUs of this host: `ktrace run all_to_all` (the whole path in one
# command), the numbered examples, then `ktrace run` on every instrumented kernel (GPU tiers of
# tests/multigpu/test_run_cli.py). Logs and outputs go to $OUT (default ./out).
# Run from the repository root on a machine with >= 4 GPUs (N=2 on two).
#   PARTS="run examples" bash scripts/gpu_examples.sh      # a subset (run, examples, tests)
# Each part stays under ~10 minutes on 4 x H200 (Triton compiles the kernels the first time).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
N=${N:-4}
PARTS=${PARTS:-"run examples tests"}
# `ktrace run` through the CLI when it has the subcommand, else through its module (same code)
if python3 -m ktrace.cli run --list >/dev/null 2>&1; then KRUN=(python3 -m ktrace.cli run); else KRUN=(python3 -m ktrace.run); fi
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/examples_device.txt"
rc=0
step() {  # step NAME CMD...: run, log to $OUT/NAME.log, remember a failure
  local name=$1; shift
  echo "=== $name: $*" | tee "$OUT/$name.log"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$OUT/$name.log"
  local s=${PIPESTATUS[0]}
  echo "=== $name: exit $s after $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"
  [ "$s" -eq 0 ] || rc=1
}
for part in $PARTS; do
  case $part in
    run)
      step ktrace_run "${KRUN[@]}" all_to_all --nproc "$N" --out "$OUT/run" ;;
    examples)
      step example01 python3 examples/01_trace_a_single_gpu_kernel.py --out "$OUT/ex01"
      step example02 python3 examples/02_all_to_all_stalls.py --nproc "$N" --out "$OUT/ex02"
      step example03 python3 examples/03_gemm_all_scatter_schedules.py --nproc "$N" --out "$OUT/ex03" --reps ${REPS:-20}
      step example04 python3 examples/04_find_a_deadlock.py --nproc "$N" --out "$OUT/ex04"
      step example05 python3 examples/05_before_after_diff.py --nproc "$N" --out "$OUT/ex05" ;;
    tests)
      KTRACE_RUN_NPROC=$N step run_cli_tests python3 -m pytest -m "gpu or multigpu" tests/multigpu/test_run_cli.py \
        -q -p no:cacheprovider -rA -k "${PYTEST_K:-not examples_on_gpus and not example_01}" ;;
    *) echo "unknown part $part (run, examples, tests)"; rc=1 ;;
  esac
done
# keep what a reader looks at, not the bulky traces of every example
find "$OUT" -name "*.pftrace" -size +20M -delete 2>/dev/null
exit $rc
