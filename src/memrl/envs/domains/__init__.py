"""Tool implementations of the domains memrl can run (``library`` also ships its data here)."""
