"""The trainable policy: a transformers causal LM, optionally wrapped in a peft LoRA adapter.

With LoRA the reference policy for the KL term is the same model with the
adapter disabled, so no second copy of the weights is kept. Without LoRA a
frozen copy is made only when the KL term is on.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from memrl.config.schema import LoraConfig, MemRLConfig


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def build_policy(cfg: MemRLConfig, device: str | None = None, path: str | None = None) -> Any:
    """Load ``model.path`` (or ``path``) for training: LoRA and gradient checkpointing per config."""
    from memrl.models.resolve import load_model

    model = load_model(path or cfg.model.path, dtype=cfg.model.dtype, device=device)
    if cfg.trainer.gradient_checkpointing:
        # transformers >= 5.x renamed it; older versions only have the first name
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
        model.config.use_cache = False
    if cfg.lora.enabled:
        model = add_lora(model, cfg.lora)
    return model


def add_lora(model: Any, lora: LoraConfig) -> Any:
    from peft import LoraConfig as PeftLoraConfig

    from memrl.models.peft_wrap import checkpointing, get_peft_model

    pcfg = PeftLoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                          target_modules=lora.target_modules, task_type="CAUSAL_LM")
    model = get_peft_model(model, pcfg)
    if checkpointing(model):
        model.enable_input_require_grads()
    return model


class Reference:
    """Log-probs under the reference policy (initial weights)."""

    def __init__(self, policy: Any, needed: bool) -> None:
        self.policy = policy
        self.frozen: Any = None
        self.moved = False  # mixed (algorithm.ref_sync_every) or loaded moved: checkpoints then keep it
        if needed and not is_peft(policy):
            self.frozen = copy.deepcopy(policy).eval()
            for p in self.frozen.parameters():
                p.requires_grad_(False)

    @torch.no_grad()
    def mix(self, alpha: float) -> None:
        """TR-DPO's update, in place: reference = alpha x policy + (1 - alpha) x reference (TRL's
        SyncRefModelCallback). Under FSDP both models are sharded alike: each rank mixes its own shards."""
        assert self.frozen is not None, "only a frozen copy (full fine-tuning) can be mixed"
        for ref, own in zip(self.frozen.parameters(), self.policy.parameters(), strict=True):
            ref.mul_(1.0 - alpha).add_(own.detach().to(ref.dtype), alpha=alpha)
        self.moved = True

    @contextlib.contextmanager
    def model(self) -> Iterator[Any]:
        if self.frozen is not None:
            yield self.frozen
        elif is_peft(self.policy):
            with self.policy.disable_adapter():
                yield self.policy
        else:  # not needed: callers do not ask
            yield self.policy


def merged_state_dict(model: Any, state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Plain (base-model) parameter names and values with LoRA folded in: what an engine loads.

    ``state`` is the model's full state dict when the caller already has it (an
    FSDP run gathers it collectively); by default it is read from ``model``.
    The fold is W + scaling * B @ A per adapted layer, peft's own merge, done on
    the state dict so the live (possibly sharded) model is never modified.
    """
    if state is None:
        state = model.state_dict()
    if not is_peft(model):
        return {k: v.detach() for k, v in state.items()}
    from peft.tuners.lora import LoraLayer

    merged: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        if any(getattr(module, "use_dora", {}).values()):
            raise NotImplementedError("merging DoRA adapters into engine weights is not supported")
        base_key = f"{name}.base_layer.weight"
        weight = state[base_key].float()
        for adapter in module.active_adapters:
            a = state[f"{name}.lora_A.{adapter}.weight"].float()
            b = state[f"{name}.lora_B.{adapter}.weight"].float()
            delta = (b @ a) * module.scaling[adapter]
            weight = weight + (delta.T if getattr(module, "fan_in_fan_out", False) else delta)
        merged[base_key] = weight.to(state[base_key].dtype)
    prefix = "base_model.model."
    out = {}
    for k, v in state.items():
        if "lora_" in k:
            continue
        v = merged.get(k, v)
        k = k[len(prefix):] if k.startswith(prefix) else k
        out[k.replace(".base_layer.", ".")] = v.detach()
    return out


def export_model(model: Any, tokenizer: Any, out: Path, *, force: bool = False,
                 extra_files: dict[str, str] | None = None) -> Path:
    """Write a plain Hugging Face folder (LoRA merged, safetensors) that transformers/vLLM load as-is.

    ``out`` must not be a file, nor a non-empty folder unless ``force`` (then it is replaced whole).
    ``extra_files`` (name -> text) land in the folder in the same atomic step, so a crash never leaves
    the model without them.
    """
    from memrl.train.outdir import check_target, mark_export, replacing_dir

    check_target(out, force)
    if is_peft(model):
        base = copy.deepcopy(model).merge_and_unload()
    else:
        base = model
    with replacing_dir(out) as tmp:
        base.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
        mark_export(tmp)  # what a later --force may replace
    return out
