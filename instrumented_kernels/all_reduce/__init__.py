"""All-reduce, one-shot and two-shot, on the symmetric heap (see README.md)."""
