"""The bundled demo: a synthetic long-context needle task, an SFT warm start, then MemAgent GRPO."""
