#!/usr/bin/env bash
# GPU checks of `ktrace run` after the kernel-folder move and the switch to torchrun, on 2 GPUs
# of one host (2 x H200). Run from the repository root:
#     OUT=out bash scripts/gpu_run_checks.sh                  # every part
#     PARTS="run tier" OUT=out bash scripts/gpu_run_checks.sh  # some parts
# Parts (each meant to fit one 10-minute call; not yet timed on the GPUs):
#   run   `ktrace run --list`; `ktrace run` of every kernel folder at 2 ranks (default shapes;
#         all_reduce two-shot, gemm_all_scatter fused_ws), each run.json checked; a skipped
#         notify reported as a hang; a hung run stopped by --timeout with the ranks named
#   tier  the multi-GPU test tier through the launcher (torchrun underneath): tests/multigpu,
#         tests/kernels
#   cli   tests/multigpu/test_run_cli.py (ktrace run on every kernel, checked against run.json)
#   user  a user's script with the capture API under plain torchrun and under Slurm's
#         environment (two tasks started by hand, as srun would); pytest under plain torchrun;
#         the kernel benchmark's discovery of every folder's bench.py
# Every step's output goes to $OUT/logs/<step>.log (plus the runs' outputs under $OUT/logs);
# the last lines say which steps failed, and the exit status is non-zero if any did.
# perfetto and orjson wheels for this Python in .whl/ are installed into a temporary folder
# first when present (the trace writers need them).
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L"
N=${N:-2}
PARTS=${PARTS:-"run tier cli user"}
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
# NVLink multicast is NOT exported here on purpose: ktrace must switch it off by itself.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ktrace-site .whl/*.whl \
    && export PYTHONPATH=/tmp/ktrace-site:$PYTHONPATH || { echo "wheel install failed"; exit 1; }
fi
failed=()
step() {  # [EXPECT_RC=n] step NAME LIMIT_S CMD...: run with a time limit, log, remember a failure
  local name=$1 lim=$2 want=${EXPECT_RC:-0}; shift 2; local t0=$SECONDS
  echo "=== $name: $*" | tee "$L/$name.log"
  timeout --kill-after=15 "$lim" "$@" >> "$L/$name.log" 2>&1; local rc=$?
  echo "=== $name: exit $rc (expected $want) after $((SECONDS - t0)) s" | tee -a "$L/$name.log"
  tail -n "${TAIL:-6}" "$L/$name.log" | sed 's/^/    /'
  [ "$rc" -eq "$want" ] || failed+=("$name(rc=$rc)")
}
expect() {  # expect NAME REGEX: the step's log must hold a line matching REGEX
  grep -Eq "$2" "$L/$1.log" || { echo "=== $1: missing /$2/"; failed+=("$1(missing: $2)"); }
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.device_count())"
} > "$L/device.txt" 2>&1; cat "$L/device.txt"
python3 -c "import perfetto, orjson" 2>/dev/null || echo "WARNING: perfetto/orjson missing: the trace writers will fail"

run_kernel() {  # run_kernel KERNEL [ARGS...]: the README command at N ranks, then its run.json checked
  local k=$1; shift
  step "run_$k" 420 python3 -m ktrace.cli run "$k" --nproc "$N" --out "$L/run_$k" "$@"
  expect "run_$k" "^ktrace run: $k on $N GPU\(s\)"
  expect "run_$k" "^\[rank 0\] wrote .*$k\.ktrace"
  expect "run_$k" "ktrace open .*$k\.pftrace"
  step "run_${k}_json" 60 python3 -c "
import json, sys
info = json.load(open('$L/run_$k/run.json'))
bad = {r: e for r, e in info['ranks'].items() if e['timeouts'] or e['rel_err'] is None or e['rel_err'] > 1e-2}
print('ranks', sorted(info['ranks']), 'rel_err', [e['rel_err'] for e in info['ranks'].values()])
sys.exit(1 if bad or info['world_size'] != $N else 0)"
}

for part in $PARTS; do
  case $part in
    run)
      step list 60 python3 -m ktrace.cli run --list
      expect list "^gemm_rs: GEMM of K shards fused with the reduce-scatter of its rows"
      run_kernel all_to_all
      run_kernel all_reduce -s method=two_shot
      run_kernel gemm_all_scatter -s schedule=fused_ws
      run_kernel ag_gemm
      run_kernel gemm_rs
      for k in all_to_all all_reduce gemm_all_scatter ag_gemm gemm_rs; do
        grep -q "torch.distributed.run --nproc-per-node $N --standalone --max-restarts 0" "$L/run_$k/logs/torchrun.log" 2>/dev/null \
          || failed+=("run_$k(no torchrun command in logs/torchrun.log)")
        [ -s "$L/run_$k/logs/rank$((N - 1)).log" ] || failed+=("run_$k(no log of rank $((N - 1)))")
      done
      # rank N-1 skips the first notify to rank 0 of the combine stage: a hang in the report
      step run_skip 300 python3 -m ktrace.cli run all_to_all --nproc "$N" --out "$L/run_skip" \
        -s max_tokens=64 -s skew=0 --skip "$((N - 1)):$((64 * N))" --steps 1 -v
      expect run_skip "HANG: rank 0 .* from rank $((N - 1))"
      # a rank stuck for 60 s in a wait whose notify never comes: --timeout stops every rank and names it
      EXPECT_RC=1 step run_hang_timeout 240 python3 -m ktrace.cli run all_to_all --nproc "$N" --out "$L/run_hang" \
        -s skew=0 --skip "$((N - 1)):$((64 * N))" --timeout-ms 60000 --timeout 90
      expect run_hang_timeout "rank [0-9]+: TIMED OUT"
      expect run_hang_timeout "^FAILED: rank .*\(timeout\)"
      find "$L" -name "*.pftrace" -size +20M -delete 2>/dev/null ;;
    tier)
      step tier_multigpu 540 python3 -m ktrace.testing.launch -n "$N" --timeout 500 --log-dir "$L/tier_multigpu_ranks" -- \
        python3 -m pytest -m multigpu tests/multigpu -q -p no:cacheprovider -rfE
      expect tier_multigpu "^ALL RANKS PASSED"
      step tier_kernels 570 python3 -m ktrace.testing.launch -n "$N" --timeout 530 --log-dir "$L/tier_kernels_ranks" -- \
        python3 -m pytest -m multigpu tests/kernels -q -p no:cacheprovider -rfE
      expect tier_kernels "^ALL RANKS PASSED" ;;
    cli)
      step run_cli_tests 570 env KTRACE_RUN_NPROC="$N" python3 -m pytest -m "gpu or multigpu" tests/multigpu/test_run_cli.py \
        -q -p no:cacheprovider -rA -k "not examples_on_gpus and not example_01"
      expect run_cli_tests "7 passed" ;;
    user)
      cat > "$L/user_capture.py" <<'EOF'
"""A user's script: its own traced kernel, the capture API as documented, under torchrun or srun."""
import os
import sys

import torch
import triton
import triton.language as tl

import ktrace
import ktrace.language as kl
import ktrace.shmem as shmem
from ktrace.dist_env import rank_env


@ktrace.trace(events_per_program=2)
@triton.jit
def scale(x, out, n, a, BLOCK: tl.constexpr, ktrace_buf=None, KTRACE: tl.constexpr = 0):
    kt = kl.init(ktrace_buf, KTRACE)
    s = kl.begin(kt, "scale", tl.program_id(0))
    off = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = off < n
    tl.store(out + off, a * tl.load(x + off, mask=m), mask=m)
    kt = kl.end(kt, s)


launcher = rank_env().launcher
rank, world = shmem.init_distributed()
heap = shmem.SymmetricHeap(64 << 20)
x = torch.randn(1 << 20, device="cuda")
out = torch.empty_like(x)
grid = (triton.cdiv(x.numel(), 1024),)
scale[grid](x, out, x.numel(), 2.0, BLOCK=1024)
with ktrace.capture(heap=heap) as cap:
    for _ in range(3):
        scale[grid](x, out, x.numel(), 2.0, BLOCK=1024)
torch.cuda.synchronize()
torch.testing.assert_close(out, 2.0 * x)
assert (cap.rank, cap.world_size) == (rank, world), (cap.rank, cap.world_size, rank, world)
merged = cap.gather(dst=0)
print(f"rank {rank}/{world} ({launcher}) on cuda:{torch.cuda.current_device()}, multicast off:",
      *(os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")), flush=True)
if rank == 0:
    path = ktrace.write_capture(sys.argv[1], merged)
    print(f"user script: {world} ranks started by {launcher}, wrote {path}", flush=True)
heap.barrier()
torch.distributed.destroy_process_group()
EOF
      step user_torchrun 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$N" \
        "$L/user_capture.py" "$L/user_torchrun.ktrace"
      expect user_torchrun "^user script: $N ranks started by torchrun"
      expect user_torchrun "multicast off: 0 1 1$"
      step user_torchrun_info 60 python3 -m ktrace.cli info "$L/user_torchrun.ktrace"
      expect user_torchrun_info "world size $N, ranks \[0, 1"
      # what srun gives each task, without srun (this host has no Slurm): two tasks by hand
      step user_srun 300 bash -c 'for r in $(seq 0 $(($2 - 1))); do
          env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT SLURM_PROCID=$r SLURM_NTASKS=$2 \
            SLURM_STEP_NUM_TASKS=$2 SLURM_LOCALID=$r SLURM_STEP_NODELIST=localhost SLURM_JOB_ID=4242 \
            python3 "$0" "$1" & done; rc=0; for r in $(seq 1 $2); do wait -n || rc=1; done; exit $rc' \
        "$L/user_capture.py" "$L/user_srun.ktrace" "$N"
      expect user_srun "^user script: $N ranks started by slurm"
      step user_srun_info 60 python3 -m ktrace.cli info "$L/user_srun.ktrace"
      expect user_srun_info "world size $N, ranks \[0, 1"
      step pytest_torchrun 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$N" --max-restarts 0 \
        -m pytest -m multigpu tests/multigpu/test_shmem_multigpu.py -q -p no:cacheprovider -rfE
      expect pytest_torchrun "passed"
      step bench_discovery 420 python3 -m ktrace.testing.launch -n "$N" --timeout 400 -- \
        python3 benchmarks/kernels.py --reps 5 --warmup 2 --json "$L/bench_discovery.json"
      for k in all_to_all all_reduce gemm_all_scatter ag_gemm gemm_rs; do expect bench_discovery "^\[rank 0\] \| $k \|"; done ;;
    *) echo "unknown part $part (run, tier, cli, user)"; failed+=("part:$part") ;;
  esac
done
find "$L" -name "*.pftrace" -size +20M -delete 2>/dev/null
if [ ${#failed[@]} -gt 0 ]; then echo "GPU RUN CHECKS FAILED: ${failed[*]}"; exit 1; fi
echo "GPU RUN CHECKS PASSED ($PARTS)"
