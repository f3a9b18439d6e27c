"""The benchmarks' interleaving: what ran before a timed batch decides the caches' and the peers'
state, so every callable must follow every other about equally often (``harness.run_orders``)."""

from collections import Counter

from instrumented_kernels.harness import run_orders


def _followers(orders):
    """How often each callable ran right after each other one, across repetitions too."""
    flat = [n for o in orders for n in o]
    return Counter(zip(flat, flat[1:]))


def test_every_callable_follows_every_other_about_equally_often():
    names = ["untraced", "traced", "deferred", "twin"]
    orders = run_orders(names, 2000)
    assert all(sorted(o) == sorted(names) for o in orders)
    pairs = _followers(orders)
    want = {(a, b) for a in names for b in names if a != b}
    assert want <= set(pairs)
    # 2000 repetitions of 4: 3 adjacencies inside each (6000 over the 12 ordered pairs: 500 each)
    # and one across each boundary (2000 over 16 pairs, repeats included: 125 each): ~625 a pair
    got = [pairs[p] for p in want]
    assert min(got) > 525 and max(got) < 725, got


def test_a_rotation_would_fail_that_check():
    """The order used before (a rotation by one place) lets each callable follow the same one."""
    names = ["untraced", "traced", "deferred", "twin"]
    rotation = [[names[(r + i) % 4] for i in range(4)] for r in range(2000)]
    pairs = _followers(rotation)
    assert pairs[("traced", "untraced")] == 0 and pairs[("untraced", "traced")] > 1400


def test_every_rank_draws_the_same_orders():
    names = list("abcde")
    assert run_orders(names, 50) == run_orders(names, 50)
    assert run_orders(names, 50, seed=1) != run_orders(names, 50)
