# Sourced by the one-call GPU scripts (gpu_verify.sh, gpu_verify_1gpu.sh): the environment of a
# GPU machine (NVLink multicast off, the carried wheels), `step NAME LIMIT_S CMD...` (runs CMD
# under a time limit when NAME -- up to a ':' -- is in $STEPS, logs to $L/NAME.log, prints the lines
# matching $STEP_GREP, and adds NAME to `failed` on a non-zero exit) and the device's description
# in $L/device.txt. Needs $L and $STEPS set.
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ktrace-site .whl/*.whl \
    && export PYTHONPATH=/tmp/ktrace-site:$PYTHONPATH || { echo "wheel install failed"; exit 1; }
fi
STEP_GREP=${STEP_GREP:-"passed|failed|error|PASSED|FAILED|ratio|traced"}
failed=()
step() {  # step NAME LIMIT_S CMD...
  local name=$1 lim=$2; shift 2; local t0=$SECONDS log="$L/${name//:/_}.log"
  case " $STEPS " in *" ${name%%:*} "*) ;; *) return ;; esac
  echo "=== $name: $*" | tee "$log"
  timeout --kill-after=10 "$lim" "$@" >> "$log" 2>&1; local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
  grep -E "$STEP_GREP" "$log" | tail -n "${TAIL:-6}" | sed 's/^/    /'
  [ "$rc" -eq 0 ] || failed+=("$name(rc=$rc)")
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.device_count())"
} > "$L/device.txt" 2>&1; cat "$L/device.txt"
