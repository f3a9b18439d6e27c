"""ag_gemm: see README.md."""
