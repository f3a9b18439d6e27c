#!/usr/bin/env bash
# Record tests/fixtures/profile/ (a model step under torch.profiler with a ktrace capture) on one GPU.
# Files go to $OUT (default ./out). Run from the repository root.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/device.txt" 2>&1
timeout 240 python3 -m tests.fixtures.make_profile_fixture "$OUT/profile" 2>&1 | tee "$OUT/profile.log"
ls -la "$OUT/profile"
