"""FSDP2 (``torch.distributed.fsdp.fully_shard``) for ``cluster.strategy=fsdp``.

Each decoder layer becomes its own shard group (the classes a transformers
model lists in ``_no_split_modules``), then the root, so a rank holds 1/W of
the weights, gradients and optimizer state and gathers one layer at a time.
FSDP averages gradients over the W ranks; the trainer normalises each rank's
loss by the global token count and multiplies it by W, so the average is the
sum the DDP-style path computes and both strategies make the same update.
(A divide factor of 1 would say the same, but gloo has no PREMUL_SUM.)

Sharded modules run collectives in forward and backward, which is why every
rank must do the same number of passes (the trainer pads with zero-weight
passes) and why whole-model reads (engine weights, checkpoints) are gathered
with ``torch.distributed.checkpoint.state_dict`` on every rank at once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _dcp() -> Any:
    """torch's distributed-checkpoint state-dict API, imported on first use: importing it pulls in DTensor and
    sympy (~2 s), which every process that imports the trainer paid, sharded or not."""
    from torch.distributed.checkpoint import state_dict

    return state_dict


def _full() -> Any:
    return _dcp().StateDictOptions(full_state_dict=True, cpu_offload=True)


def _layer_classes(model: Any) -> set[str]:
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    return names


def shard_model(model: torch.nn.Module) -> torch.nn.Module:
    """Shard ``model`` in place over all ranks of the default process group; returns it."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    device = next(model.parameters()).device
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    layers = _layer_classes(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder-layer classes (_no_split_modules); "
                         "cluster.strategy=fsdp needs them to shard layer by layer")
    count = 0
    for m in list(model.modules()):
        if type(m).__name__ in layers:
            fully_shard(m, mesh=mesh)
            count += 1
    if not count:
        raise ValueError(f"none of {sorted(layers)} found in {type(model).__name__}")
    fully_shard(model, mesh=mesh)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model state on CPU (collective when sharded: call on every rank; rank 0 gets the values)."""
    if not is_sharded(model):
        return {k: v.detach() for k, v in model.state_dict().items()}
    state = _dcp().get_model_state_dict(model, options=_full())
    first: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        # tied weights (lm_head = embed_tokens) come back as two copies; share one tensor again, as
        # model.state_dict() does, so save_pretrained writes the tied weight once
        if id(p) in first and name in state and first[id(p)] in state:
            state[name] = state[first[id(p)]]
        first.setdefault(id(p), name)
    return state


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Optimizer state keyed by parameter name, unsharded, on CPU (collective when sharded).

    Keyed by name rather than position, so a run can resume with another
    strategy or number of ranks.
    """
    return _dcp().get_optimizer_state_dict(model, optimizer, options=_full())


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Inverse of ``full_optimizer_state``: every rank passes the full state and keeps its shard."""
    dcp = _dcp()
    dcp.set_optimizer_state_dict(model, optimizer, state, options=dcp.StateDictOptions(full_state_dict=True))


def grad_norm_value(norm: torch.Tensor) -> torch.Tensor:
    """``clip_grad_norm_`` returns a DTensor for sharded gradients; the plain total norm either way."""
    full = getattr(norm, "full_tensor", None)
    return full() if full is not None else norm
