"""The kinds of root cause: one module each, listed here once.

A kind's module has ``KIND`` (its name), ``TITLE`` (a few words for the verdict),
``detect(ctx) -> list[Cause]`` (each cause with its typed ``detail`` and its ``changes`` for the
replay) and ``describe(cause, ctx) -> Description`` (text, short label, time window and the claims
its text makes). Adding a kind is one module and one line in :data:`MODULES`.
"""

from __future__ import annotations

from . import hang, late_launch, late_notifies, late_start, slow_link, straggler, uneven_ranks, uneven_work

#: Every kind of root cause, in the order they are looked for.
MODULES = (hang, late_launch, late_start, late_notifies, straggler, uneven_work, uneven_ranks, slow_link)
#: kind name -> module.
BY_KIND = {m.KIND: m for m in MODULES}
#: The kinds' names.
KINDS = tuple(BY_KIND)
