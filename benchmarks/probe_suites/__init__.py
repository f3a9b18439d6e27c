"""The suites of ``benchmarks/probe_overhead.py``, one module each, over one shared harness.

``common`` (timing, the variants' launchers and buffers, the check of every traced variant's
records, the printed table) and ``cases`` (the hand-off kernels' ping-pong, pipeline and fan-in
at one rank or between pairs of ranks) serve the suites:

=========  ===================================================================================
copy       the design brief's worst case: a 64 Mi-element copy, one span (or four) per program
handoff    ping-pong, pipeline, fan-in; each probe kind on, untraced twin, controls
phase      the ping-pong's polling-phase sweep, per kind the cost averaged over 25 delays
anatomy    the pipeline's traced variants decoded launch by launch: where a tile's time goes
diag       the ping-pong with raw operations at the hand-off instead of probes
notify     the ping-pong with its NOTIFY record's timer reads moved
small      fixed costs of a few-microsecond launch (a span, and the same record made by hand)
a2a        the MoE all-to-all with controls, dispatch and combine apart (2 ranks)
local      the ping-pong between two programs of one GPU, one process
cost       cycles per probe in a loop
hook       rows from another module's benchmark (``--hook module:function``)
=========  ===================================================================================
"""

#: The suites, in the order the command lists them.
SUITES = ("copy", "handoff", "phase", "anatomy", "diag", "notify", "small", "a2a", "local", "cost", "hook")
#: Suites that run on one GPU in one process (rank 0 of a launch).
ONE_GPU = ("local", "cost")
#: Suites that run at one rank without a launcher (programs of one GPU hand off to each other).
ONE_RANK = ("handoff", "phase", "anatomy", "diag", "notify", "small", "hook")
