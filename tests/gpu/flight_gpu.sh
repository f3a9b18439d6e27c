#!/bin/bash
# The flight recorder's GPU run (see tests/gpu/flight_gpu.py): ring mode's cost, then a hung
# kernel dumped by the watchdog and by `ktrace dump`, then released. Each step runs in its own
# process group, killed whole (-9) at its time limit so that no spinning kernel outlives it.
OUT=${OUT:-/tmp/flight-out}
mkdir -p "$OUT/flight"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader

source "$(dirname "$0")/_step.sh"

step 90 python3 tests/gpu/flight_gpu.py --role bench --out "$OUT/flight" --reps 40
step 110 python3 tests/gpu/flight_gpu.py --role hang --out "$OUT/flight" --stall-s 3
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
nvidia-smi --query-compute-apps=pid,name --format=csv,noheader
ls -la "$OUT/flight" "$OUT/flight/dumps" 2>/dev/null
rm -rf "$OUT/flight/registry" "$OUT/flight/dumps" "$OUT/flight/release"
