"""Long-context evaluation across document counts (RULER-HQA style)."""
