#!/usr/bin/env bash
# Tuning round on a 4-GPU machine: our tile GEMM's configurations vs torch.matmul (one GPU), the
# all-reduce methods vs NCCL up to 1 MiB, the GEMM + all-scatter schedules with the pointer and
# the TMA GEMM, and one traced GEMM + all-scatter run (trace + report). Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/device.txt"
rc=0
STEPS=${STEPS:-"gemm ar sched run"}
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
has gemm && { CUDA_VISIBLE_DEVICES=0 timeout ${T_GEMM:-200} python3 benchmarks/gemm_tune.py --world 4 --json "$OUT/gemm_single.json" 2>&1 | tee "$OUT/gemm_single.log" || rc=1; }
has ar && { timeout ${T_AR:-150} python3 -m ktrace.testing.launch -n 4 -- python3 benchmarks/kernels.py --kernels all_reduce \
  --cases 4096B 16384B 65536B 262144B 1048576B 4194304B --json "$OUT/ar.json" 2>&1 | tail -40 > "$OUT/ar.log" || rc=1; }
has artune && { timeout ${T_ARTUNE:-200} python3 -m ktrace.testing.launch -n 4 -- python3 benchmarks/allreduce_tune.py ${ARTUNE_ARGS:-} \
  --json "$OUT/artune.json" 2>&1 | grep -v "^\[rank [123]\]" | tail -80 > "$OUT/artune.log" || rc=1; }
has sched && { timeout ${T_SCHED:-240} python3 -m ktrace.testing.launch -n 4 -- python3 benchmarks/gemm_tune.py --schedules --reps 15 ${SCHED_ARGS:-} \
  --json "$OUT/sched.json" 2>&1 | grep -v "^\[rank [123]\]" | tail -60 > "$OUT/sched.log" || rc=1; }
has run && { timeout ${T_RUN:-120} python3 -m ktrace.cli run gemm_all_scatter -n 4 -s M=8192 -s N=3584 -s K=14336 -s schedule=fused_sequential \
  --out "$OUT/run_fs" 2>&1 | tail -40 > "$OUT/run_fs.log" || rc=1; }
exit $rc
