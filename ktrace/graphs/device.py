"""Device code of traced CUDA graph replays: the commit kernel (``ktrace.graphs``).

Captured right after a traced launch, on its stream, so that every replay of the graph runs it
after the traced kernel: it copies the launch's buffer (the stage) into the ring slot of this
replay, re-zeroes what the next replay's probes expect zero, and advances the replay count.
"""

import triton
import triton.language as tl

#: Words each program moves (8 KiB): a commit kernel runs ``cdiv(words, COMMIT_BLOCK)`` programs.
COMMIT_BLOCK = 1024


@triton.jit(do_not_specialize=("key", "n_words", "zero_from", "keys_at", "slots_at", "slot_words", "ring_slots"))
def replay_commit(stage, ring, mirror, key, n_words, zero_from, keys_at, slots_at, slot_words, ring_slots,
                  BLOCK: tl.constexpr):
    """Copy the stage into slot ``e % ring_slots`` of ``ring``, zero its words from ``zero_from``,
    and count the replay.

    Args:
        stage: the traced launch's buffer (int64 words; ``n_words`` of them): program ``p`` moves
            words ``[p * BLOCK, (p + 1) * BLOCK)`` (the grid is ``cdiv(n_words, BLOCK)``).
        ring: the replay ring (``ktrace.graphs.ring``'s layout): stamps; at ``keys_at`` one key
            per program, then one replay count ``e`` per program, then the mirror word; at
            ``slots_at`` ``ring_slots`` slots of ``slot_words`` words.
        mirror: one int64 the first program sets to ``e + 1`` after this replay (the ring's own
            mirror word, or for a flight-recorder launch one in pinned host memory: which replay
            is in progress, read by a live dump).
        key: the launch's key (a random constant >= 2**62): a program's count is read as 0 until
            it has stored the key beside it, so the ring needs no zeroing before the first replay.
        zero_from: the first word of the stage that the next replay's probes expect zero (0 for a
            dense buffer: records and dropped counts; the heads for a ring-layout buffer, whose
            records are read up to the heads only).

    Each program reads and advances only its own count: no program races another, no atomic.
    Cost: a read of the stage and a write of the slot (the whole buffer: the host reads a slot
    as the dense buffer it is, zeros included), zeros over the words the replay wrote, two int64
    reads and writes per program, the stamp and the mirror. One thread's store of the stamp is not ordered with
    the other programs' copies: the host reads it once the kernel has ended.
    """
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    mine = tl.load(ring + keys_at + pid)
    e = tl.where(mine == key, tl.load(ring + keys_at + G + pid), 0)
    slot = e % ring_slots
    dst = ring + slots_at + slot * slot_words
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n_words
    v = tl.load(stage + offs, mask=m, other=0)
    tl.store(dst + offs, v, mask=m)
    tl.store(stage + offs, tl.zeros_like(v), mask=m & (offs >= zero_from) & (v != 0))  # (zero where it is not)
    tl.store(ring + keys_at + G + pid, e + 1)
    tl.store(ring + keys_at + pid, key)
    if pid == 0:
        tl.store(ring + slot, e + 1)
        tl.store(mirror, e + 1)
