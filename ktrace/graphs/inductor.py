"""The names of the Triton kernels torch.compile generates (Inductor), for captures that trace them.

Inductor compiles a graph's fused operations into ``@triton.jit`` functions, each wrapped in a
``torch._inductor.runtime.triton_heuristics.CachingAutotuner`` (its ``fn`` is the Triton
function, its ``inductor_meta["kernel_name"]`` the name Inductor gave it:
``triton_poi_fused_add_mul_0``, ``triton_red_fused_sum_1``, ``triton_per_fused_softmax_2``, ...,
the same name the generated module, the profiler and ``TORCH_LOGS=output_code`` show). With
``mode="reduce-overhead"`` those kernels run inside CUDA graphs that torch.compile captures and
replays.

They have no ``ktrace_buf`` / ``KTRACE`` parameters, so ``@ktrace.trace`` cannot wrap them; they
are traced by the path that instruments kernels without edits (a separate package, not this
one). What this package gives that path:

* :func:`kernel_name`: the name a capture records for such a kernel (its Inductor name);
* the graph-aware entry point ``ktrace.session.Session.new_launch(kernel, grid, capacity,
  device)``: it takes any kernel object with ``name`` (use :func:`kernel_name`), ``jit_fn`` (the
  Triton function, for region names) and ``warm`` (a set of ``(device, KTRACE)`` launched outside
  a capture, filled by its launcher), and returns the launch's buffer and gate. Called while
  torch.compile captures its graph, it gives the launch a stage and a replay ring and a commit
  to launch right after the kernel (``after``), exactly as for a ``@ktrace.trace`` kernel, so
  every replay of the compiled graph is recorded as a launch under that name.

Imports nothing but the standard library: it reads attributes of objects it is given.
"""

from __future__ import annotations


def kernel_name(obj) -> str | None:
    """The Inductor name of a kernel torch.compile generated, or None if ``obj`` is not one.

    Args:
        obj: a ``CachingAutotuner`` (what Inductor's generated module binds the kernel's name
            to), or the ``@triton.jit`` function it wraps.
    """
    meta = getattr(obj, "inductor_meta", None)
    if isinstance(meta, dict) and isinstance(meta.get("kernel_name"), str) and meta["kernel_name"]:
        return meta["kernel_name"]
    # (the Triton function, or the one a CachingAutotuner without the name in its meta wraps)
    fn = obj if hasattr(obj, "arg_names") else getattr(obj, "fn", None)
    name = getattr(fn, "__name__", None)
    if hasattr(fn, "arg_names") and isinstance(name, str) and name.startswith("triton_"):
        return name
    return None
