#!/usr/bin/env bash
# Bring-your-own-kernel checks on GPUs (tests/byok): the three ring kernels (plain Triton over
# torch symmetric memory, inline-asm signal helpers, an Iris-style heap), each healthy, with a
# straggler and with a skipped signal, recorded in-process with ktrace.capture(auto=...) at 4, 2
# and 1 ranks (as many as the machine has), judged by tests.byok.check; ktrace record on whole
# programs under torchrun; traced / untraced of each kernel, interleaved.
#     OUT=out STEPS="rec4 rec2 rec1 check cli bench" bash scripts/gpu_byok.sh
# Everything lands in $OUT/byok (captures, their checks, logs/); $OUT/byok.tgz packs it after
# every step (so that a call cut short still brings back what was done).
set -uo pipefail
OUT=${OUT:-out}; B="$OUT/byok"; L="$B/logs"; mkdir -p "$L"
STEPS=${STEPS:-"rec4 rec2 rec1 check cli bench"}
source scripts/_gpu_prelude.sh
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
launcher() { if [ "$1" -eq 1 ]; then echo python3; else echo "torchrun --standalone --nproc-per-node $1"; fi; }
pack() { tar czf "$OUT/byok.tgz" -C "$OUT" byok 2>/dev/null; }
step unit 240 python3 -m pytest -q -p no:cacheprovider tests/test_auto.py; pack
for n in 4 2 1; do
  [ "$n" -le "$NGPU" ] || continue
  step "rec$n" ${REC_LIMIT:-120} $(launcher "$n") -m tests.byok.scenario --style plain,asm,iris --fault none,straggler,skip --out "$B"
  pack
done
step check 240 python3 -m tests.byok.check "$B"; pack
if [ "$NGPU" -ge 4 ]; then W=4; else W=$NGPU; fi
step cli:straggler ${CLI_LIMIT:-120} python3 -m ktrace.cli record -o "$B/rec_plain" --kernels 'ring_*' -- \
  torchrun --standalone --nproc-per-node "$W" -m tests.byok.scenario --style plain --fault straggler; pack
step cli:asm ${CLI_LIMIT:-120} python3 -m ktrace.cli record -o "$B/rec_asm" --declare tests/byok/ring_asm.json -- \
  torchrun --standalone --nproc-per-node "$W" -m tests.byok.scenario --style asm --fault none; pack
step cli:skip1 ${CLI_LIMIT:-120} python3 -m ktrace.cli record -o "$B/rec_iris1" --wait-timeout-ms 20 -- \
  python3 -m tests.byok.scenario --style iris --fault skip; pack
for n in 4 1; do
  [ "$n" -le "$NGPU" ] || continue
  step "bench:$n" ${BENCH_LIMIT:-120} $(launcher "$n") -m tests.byok.scenario --style plain,asm,iris --bench 60 --out "$B"; pack
done
rm -f "$B"/rec_*/*.pftrace "$B"/rec_*/rank*.ktrace; pack
echo "=== failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
