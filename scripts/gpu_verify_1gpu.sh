#!/usr/bin/env bash
# One call on ONE GPU: the merged tree checked where it runs: the GPU tier (probes with deferred
# records and ring mode, the flight recorder's live dumps, the Gluon probes and GEMM), then
# `ktrace run` of every instrumented kernel at one rank (producer and consumer programs on one
# GPU), each checked against its reference, reported, and its capture kept for the CPU claim test.
#     OUT=out bash scripts/gpu_verify_1gpu.sh        STEPS="gpu run" OUT=out bash scripts/gpu_verify_1gpu.sh
# Logs go to $OUT/logs/<step>.log and come back as one archive with the run captures; the last
# line names the steps that failed.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L" "$OUT/captures"
STEPS=${STEPS:-"gpu run"}
KERNELS=${KERNELS:-"all_to_all all_reduce gemm_all_scatter ag_gemm gemm_rs gluon_gemm"}
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ktrace-site .whl/*.whl \
    && export PYTHONPATH=/tmp/ktrace-site:$PYTHONPATH || { echo "wheel install failed"; exit 1; }
fi
failed=()
run_step() {  # run_step NAME LIMIT_S CMD...
  local name=$1 lim=$2; shift 2; local t0=$SECONDS
  case " $STEPS " in *" ${name%%:*} "*) ;; *) return ;; esac
  echo "=== $name: $*" | tee "$L/${name//:/_}.log"
  timeout --kill-after=10 "$lim" "$@" >> "$L/${name//:/_}.log" 2>&1; local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$L/${name//:/_}.log"
  grep -E "passed|failed|error|Nothing is wrong|HANG|late|uneven|output check|rel" "$L/${name//:/_}.log" | tail -n "${TAIL:-4}" | sed 's/^/    /'
  [ "$rc" -eq 0 ] || failed+=("$name(rc=$rc)")
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.device_count())"
} > "$L/device.txt" 2>&1; cat "$L/device.txt"
run_step gpu 300 python3 -m pytest -q -p no:cacheprovider -rfE -m gpu tests/gpu
for k in $KERNELS; do
  run_step "run:$k" 150 python3 -m ktrace.cli run "$k" --nproc 1 --out "$L/run_$k"
  cp "$L/run_$k"/*.ktrace "$OUT/captures/" 2>/dev/null
done
find "$L" -name "*.pftrace" -delete 2>/dev/null; find "$L" -name "*.html" -delete 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$OUT" logs captures && rm -rf "$L" "$OUT/captures"
if [ ${#failed[@]} -eq 0 ]; then echo "GPU VERIFY (1 GPU): ALL STEPS PASSED"; else echo "GPU VERIFY (1 GPU) FAILED: ${failed[*]}"; exit 1; fi
