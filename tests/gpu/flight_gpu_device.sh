#!/bin/bash
# The flight recorder with its rings in device memory (FlightConfig(placement="device")): the hung
# kernel of tests/gpu/flight_gpu.py dumped by the watchdog and by `ktrace dump`, then released.
OUT=${OUT:-/tmp/flight-out}
mkdir -p "$OUT/flightdev"
setsid python3 tests/gpu/flight_gpu.py --role hang --placement device --out "$OUT/flightdev" --stall-s 3 &
pg=$! t=0
while kill -0 "$pg" 2>/dev/null; do
    sleep 1; t=$((t + 1))
    if [ "$t" -ge 110 ]; then echo "timed out: killing group $pg"; kill -9 -- "-$pg"; break; fi
done
wait "$pg" 2>/dev/null
kill -9 -- "-$pg" 2>/dev/null
nvidia-smi --query-compute-apps=pid,name --format=csv,noheader
rm -rf "$OUT/flightdev/registry" "$OUT/flightdev/dumps" "$OUT/flightdev/release"
