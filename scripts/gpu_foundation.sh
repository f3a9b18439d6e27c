#!/usr/bin/env bash
# GPU tier of the foundation on one GPU: probe tests, compute-sanitizer, the real-capture
# fixture, and the probe-overhead benchmark. Logs and outputs go to $OUT (default ./out).
# Run from the repository root on a GPU machine.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
rc=0
python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rA 2>&1 | tee "$OUT/gpu_tests.log" || rc=1
python3 -m tests.fixtures.make_probe_fixture "$OUT/probes_gpu.ktrace" 2>&1 | tee "$OUT/fixture.log" || rc=1
python3 benchmarks/probe_overhead.py --reps ${REPS:-200} --json "$OUT/probe_overhead.json" 2>&1 | tee "$OUT/probe_overhead.log" || rc=1
exit $rc
