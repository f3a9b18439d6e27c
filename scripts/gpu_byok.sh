#!/usr/bin/env bash
# Bring-your-own-kernel checks on GPUs (tests/byok): the three ring kernels (plain Triton over
# torch symmetric memory, inline-asm signal helpers, an Iris-style heap), each healthy, with a
# straggler and with a skipped signal, recorded in-process with ktrace.capture(auto=...) at 1, 2
# and 4 ranks (as many as the machine has), judged by tests.byok.check; ktrace record on whole
# programs under torchrun; traced / untraced of each kernel, interleaved.
#     OUT=out STEPS="unit rec1 rec2 rec4 check cli bench" bash scripts/gpu_byok.sh
# Everything lands in $OUT (byok/ captures and their checks, logs/); byok.tgz packs the captures.
set -uo pipefail
OUT=${OUT:-out}; L="$OUT/logs"; mkdir -p "$L" "$OUT/byok"
STEPS=${STEPS:-"unit rec1 rec2 rec4 check cli bench"}
source scripts/_gpu_prelude.sh
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
launcher() { if [ "$1" -eq 1 ]; then echo python3; else echo "torchrun --standalone --nproc-per-node $1"; fi; }
step unit 240 python3 -m pytest -q -p no:cacheprovider tests/test_auto.py
for n in 1 2 4; do
  [ "$n" -le "$NGPU" ] || continue
  step "rec$n" 300 $(launcher "$n") -m tests.byok.scenario --style plain,asm,iris --fault none,straggler,skip --out "$OUT/byok"
done
step check 300 python3 -m tests.byok.check "$OUT/byok"
if [ "$NGPU" -ge 4 ]; then W=4; else W=$NGPU; fi
step cli:straggler 240 python3 -m ktrace.cli record -o "$OUT/rec_plain" --kernels 'ring_*' -- \
  torchrun --standalone --nproc-per-node "$W" -m tests.byok.scenario --style plain --fault straggler
step cli:asm 240 python3 -m ktrace.cli record -o "$OUT/rec_asm" --declare tests/byok/ring_asm.json -- \
  torchrun --standalone --nproc-per-node "$W" -m tests.byok.scenario --style asm --fault none
step cli:skip1 240 python3 -m ktrace.cli record -o "$OUT/rec_iris1" --wait-timeout-ms 20 -- \
  python3 -m tests.byok.scenario --style iris --fault skip
for n in 1 4; do
  [ "$n" -le "$NGPU" ] || continue
  step "bench:$n" 300 $(launcher "$n") -m tests.byok.scenario --style plain,asm,iris --bench 60 --out "$OUT/byok"
done
tar czf "$OUT/byok.tgz" -C "$OUT" byok rec_plain/record.ktrace rec_asm/record.ktrace rec_iris1/record.ktrace 2>/dev/null
echo "=== failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
