"""Started by Python in every process of a ``ktrace record`` command (it puts this folder first on
``PYTHONPATH``): arms the recording (``ktrace.auto.boot``), then runs the ``sitecustomize`` that
this one hides, if there is one further on the path."""

import importlib.machinery
import importlib.util
import os
import sys


def _arm():
    if not os.environ.get("KTRACE_RECORD"):
        return
    try:
        from ktrace.auto import boot

        boot.start()
    except Exception as e:  # (the program runs untraced rather than not at all)
        print(f"ktrace record: could not arm this process ({type(e).__name__}: {e}); it runs untraced", file=sys.stderr)


def _next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_arm()
_next_sitecustomize()
