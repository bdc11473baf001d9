"""Code that runs *inside* vLLM's worker processes: receiving new weights during RL.

vLLM mixes this class into its worker (``worker_extension_cls``), and memrl calls
its methods by name through ``AsyncLLM.collective_rpc``. Only names and plain
bytes cross the process boundary: vLLM refuses to ship Python functions unless
insecure serialization is on, and tensors sent as RPC arguments arrive as lists.

Weights arrive as safetensors-serialized buckets (``memrl_stage_weights``) and are
applied together by ``memrl_apply_weights`` through the worker's own
``reload_weights`` path, which re-runs the model's ``load_weights`` with vLLM's
per-layer bookkeeping (name remapping, fused q/k/v and gate/up projections, tied
embeddings). Applying only after the last bucket matters: a layer must never be
half old, half new while requests are served.

This module imports nothing from memrl so that workers start without it.
"""

from __future__ import annotations

from typing import Any


class MemrlWorkerExtension:
    """Methods vLLM adds to every worker; ``self`` is the vLLM worker."""

    def memrl_stage_weights(self, payload: bytes) -> int:
        """Keep one bucket of tensors until ``memrl_apply_weights``; returns its size in bytes."""
        from safetensors.torch import load

        staged: list[tuple[str, Any]] = self.__dict__.setdefault("_memrl_staged", [])
        staged.extend(load(payload).items())
        return len(payload)

    def memrl_apply_weights(self) -> int:
        """Load every staged tensor into the model in place; returns how many were loaded."""
        staged: list[tuple[str, Any]] = self.__dict__.pop("_memrl_staged", [])
        if not staged:
            return 0
        self.reload_weights(weights_iterator=iter(staged), is_checkpoint_format=True)  # type: ignore[attr-defined]
        return len(staged)

    def memrl_discard_staged(self) -> None:
        """Drop a partly received update (the sender failed half-way)."""
        self.__dict__.pop("_memrl_staged", None)
