#!/bin/bash
# The flight recorder with its rings in device memory (FlightConfig(placement="device")): the hung
# kernel of tests/gpu/flight_gpu.py dumped by the watchdog and by `ktrace dump`, then released.
OUT=${OUT:-/tmp/flight-out}
mkdir -p "$OUT/flightdev"
source "$(dirname "$0")/_step.sh"
step 110 python3 tests/gpu/flight_gpu.py --role hang --placement device --out "$OUT/flightdev" --stall-s 3
nvidia-smi --query-compute-apps=pid,name --format=csv,noheader
rm -rf "$OUT/flightdev/registry" "$OUT/flightdev/dumps" "$OUT/flightdev/release"
