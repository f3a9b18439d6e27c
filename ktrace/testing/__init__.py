"""Helpers for ktrace's own tests and for users testing traced kernels."""
