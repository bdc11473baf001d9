"""What the trainer sends to an engine of its own after an update: merged weights or only a LoRA adapter.

A vLLM engine started with ``engine.vllm.lora_sync=adapter`` keeps the base weights and
serves the trained adapter as a LoRA request, so each sync moves a few MB instead of the
whole model. Every other engine gets the merged weights (W + scaling * B @ A).
"""

from __future__ import annotations

from typing import Any

from memrl.config.schema import MemRLConfig


def syncs_adapter(cfg: MemRLConfig, engine: Any) -> bool:
    """Whether this run ships only the LoRA adapter to ``engine``."""
    return (cfg.lora.enabled and cfg.engine.kind == "vllm" and cfg.engine.vllm.lora_sync == "adapter"
            and hasattr(engine, "update_adapter"))


def adapter_payload(policy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(adapter tensors under peft's saved names, adapter config) of a peft policy: what peft would save."""
    from peft import get_peft_model_state_dict

    tensors = {k: v.detach() for k, v in get_peft_model_state_dict(policy).items()}
    config = policy.peft_config["default"].to_dict()
    return tensors, config


def sync_stats(engine: Any) -> dict[str, float]:
    """Bytes moved and engine-side seconds of the last sync, where the engine reports them."""
    return dict(getattr(engine, "last_sync", None) or {})
