#!/bin/bash
# The flight recorder's GPU run (see tests/gpu/flight_gpu.py): ring mode's cost, then a hung
# kernel dumped by the watchdog and by `ktrace dump`, then released. Each step runs in its own
# process group, killed whole (-9) at its time limit so that no spinning kernel outlives it.
OUT=${OUT:-/tmp/flight-out}
mkdir -p "$OUT/flight"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader

step() {  # step SECONDS CMD...: run CMD in a new process group, kill the group after SECONDS
    local limit=$1; shift
    setsid "$@" &
    local pg=$! t=0
    while kill -0 "$pg" 2>/dev/null; do
        sleep 1; t=$((t + 1))
        if [ "$t" -ge "$limit" ]; then echo "step timed out after ${limit}s: killing group $pg"; kill -9 -- "-$pg"; break; fi
    done
    wait "$pg" 2>/dev/null
    kill -9 -- "-$pg" 2>/dev/null  # whatever it started and left
    return 0
}

step 90 python3 tests/gpu/flight_gpu.py --role bench --out "$OUT/flight" --reps 40
step 110 python3 tests/gpu/flight_gpu.py --role hang --out "$OUT/flight" --stall-s 3
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
nvidia-smi --query-compute-apps=pid,name --format=csv,noheader
ls -la "$OUT/flight" "$OUT/flight/dumps" 2>/dev/null
rm -rf "$OUT/flight/registry" "$OUT/flight/dumps" "$OUT/flight/release"
