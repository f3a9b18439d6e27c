"""Compile a ``@triton.jit`` (or ``@gluon.jit``) kernel for a target without a GPU and return its assembly.

Triton compiles for ``GPUTarget("cuda", 90, 32)`` and ``GPUTarget("hip", "gfx942", 64)`` on a
CPU-only machine; this is how the AMD path is verified here (by compilation, not execution).
"""

from __future__ import annotations

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton

CUDA_SM90 = GPUTarget("cuda", 90, 32)
HIP_GFX942 = GPUTarget("hip", "gfx942", 64)
TARGETS = {"sm_90": CUDA_SM90, "gfx942": HIP_GFX942}


def compile_asm(fn, signature: dict, constexprs: dict, target: GPUTarget, stage: str | None = None, **options) -> str:
    """Compile ``fn`` and return its PTX (NVIDIA) or AMDGCN (AMD) text.

    Args:
        fn: a ``@triton.jit`` function (a ``@ktrace.trace`` wrapper is unwrapped).
        signature: argument name -> Triton type string (``"*fp32"``, ``"i32"``, ``"constexpr"``).
        constexprs: values of the constexpr arguments.
        target: the GPU target.
        stage: which text to return: None for the target assembly, or "ttir", "ttgir", "llir".
        options: compiler options (``num_warps``, ...).
    """
    fn = getattr(fn, "jit_fn", fn)
    sig = dict(signature)
    for k in constexprs:
        sig[k] = "constexpr"
    if getattr(fn, "is_gluon", lambda: False)():  # a @gluon.jit kernel: its own source class
        from triton.experimental.gluon._runtime import GluonASTSource

        src = GluonASTSource(fn, sig, constexprs=dict(constexprs))
    else:
        src = ASTSource(fn, sig, constexprs=dict(constexprs))
    kernel = triton.compile(src, target=target, options=options or None)
    if stage is not None:
        return kernel.asm[stage]
    return kernel.asm["ptx"] if target.backend == "cuda" else kernel.asm["amdgcn"]


def compile_sass(fn, signature: dict, constexprs: dict, attrs=None, **options) -> str:
    """sm_90 SASS of ``fn`` (``ptxas`` and ``nvdisasm`` ship with Triton's NVIDIA backend).

    Args as :func:`compile_asm`; ``attrs``: argument attributes as a launch specialises them
    (``ASTSource``'s, e.g. ``{(0,): [["tt.divisibility", 16]]}``); ``options``: compiler options
    (``num_warps``, ``maxnreg``, ...).

    Raises:
        FileNotFoundError: this Triton ships no ``nvdisasm``.
    """
    import os
    import subprocess
    import tempfile

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    if not os.path.exists(tool):
        raise FileNotFoundError(f"nvdisasm not shipped with this Triton ({tool})")
    fn = getattr(fn, "jit_fn", fn)
    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    kernel = triton.compile(ASTSource(fn, sig, constexprs=dict(constexprs), attrs=attrs), target=CUDA_SM90, options=options or None)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(kernel.asm["cubin"])
        return subprocess.run([tool, "-c", path], capture_output=True, text=True, check=True).stdout
