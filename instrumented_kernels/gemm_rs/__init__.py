"""gemm_rs: see README.md."""
