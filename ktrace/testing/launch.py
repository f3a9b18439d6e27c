"""The launcher's former name: :mod:`ktrace.launch` (``python -m ktrace.testing.launch ...`` runs
it as before)."""

from __future__ import annotations

import sys

from ..launch import (LaunchConfig, RankResult, Rendezvous, add_rendezvous_args, free_port, launch, main, outcome_counts,
                      rendezvous_from_args, run_rank, summarize, torchrun_command)

__all__ = ["LaunchConfig", "RankResult", "Rendezvous", "add_rendezvous_args", "free_port", "launch", "main", "outcome_counts",
           "rendezvous_from_args", "run_rank", "summarize", "torchrun_command"]

if __name__ == "__main__":
    sys.exit(main())
