#!/bin/bash
# Streaming a persistent kernel (tests/gpu/flight_gpu.py --role stream): 132 programs, a mark every
# 10 us each for 5 s (66 M records), drained from pinned rings into a spill file while it runs.
OUT=${OUT:-/tmp/flight-out}
mkdir -p "$OUT/stream"
source "$(dirname "$0")/_step.sh"
step 100 python3 tests/gpu/flight_gpu.py --role stream --out "$OUT/stream" --secs 5 --gap-ns 10000 --programs 132 --slots 4096
rm -f "$OUT/stream/stream.spill"
nvidia-smi --query-compute-apps=pid,name --format=csv,noheader
