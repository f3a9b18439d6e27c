"""gemm_all_scatter: see README.md."""
