"""Stand-ins with the signatures of libraries that cannot be installed here (see each module)."""
