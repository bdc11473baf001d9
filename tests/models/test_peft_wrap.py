"""LoRA runs print no transformers deprecation warning, and checkpointing is still seen through peft."""

from __future__ import annotations

import warnings

import torch

from memrl.config import load_config
from memrl.models.peft_wrap import checkpointing
from memrl.train.policy import build_policy


def _build(*overrides: str):
    cfg = load_config(None, ["model.path=tiny", "lora.enabled=true", *overrides])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy = build_policy(cfg, device="cpu")
    return policy, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_a_lora_policy_builds_without_the_checkpointing_deprecation_warning():
    policy, future = _build()
    assert not [m for m in future if "checkpointing" in m], future
    assert not checkpointing(policy)


def test_checkpointing_on_makes_the_lora_inputs_require_grad():
    policy, future = _build("trainer.gradient_checkpointing=true")
    assert checkpointing(policy) and not [m for m in future if "checkpointing" in m], future
    ids = policy.get_input_embeddings()(torch.tensor([[1, 2, 3]]))
    assert ids.requires_grad  # enable_input_require_grads ran: checkpointed LoRA layers get gradients
