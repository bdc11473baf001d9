"""vLLM tests: they run vLLM itself (its CPU build in CI: ``make test-vllm``); elsewhere they skip."""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

# Options shared by every engine the tests start: float32 so vLLM and transformers agree to 1e-4,
# a 4K window, a quarter GiB of KV cache, eager mode (the default) for a fast start.
VLLM_OVERRIDES = ["model.path=tiny32", "model.dtype=float32", "engine.kind=vllm",
                  "engine.vllm.max_model_len=4096", "engine.vllm.kv_cache_memory=0.25"]
