"""MoE all-to-all dispatch and combine on the symmetric heap (see README.md)."""
