"""One base model, many LoRA tenants: a peft model with an adapter per training run and per loaded sampler.

Every ``create_lora_training_client`` adds a peft adapter (its own rank and target layers) to the one
loaded base model and a torch ``AdamW`` over that adapter's tensors only, so several training runs
share the base weights and never each other's gradients or optimizer moments. Only one adapter is
active at a time; the server's single worker activates the right one before each request, so
requests never interleave on the model. Samplers (saved weights) are adapters too, loaded on first
use from tensors kept on the CPU and evicted least-recently-used past ``max_sampler_adapters``.

Which layers a LoRA covers follows Tinker's three switches: ``train_attn`` (linear layers under an
attention block), ``train_mlp`` (under an MLP/feed-forward block) and ``train_unembed`` (the output
head). The scale is ``lora_alpha / rank`` with ``lora_alpha`` fixed for the server (``--lora-alpha``).
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from memrl.tinker.schemas import MAX_LORA_RANK

_MLP = ("mlp", "feed_forward", "ffn", "experts")
_ATTN = ("attn", "attention")


@dataclass(frozen=True)
class LoraSpec:
    """Tinker's ``LoraConfig``: rank, init seed, and which of attention / MLP / output head it adapts."""

    rank: int
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoraSpec:
        """A checkpoint's record, held to what a request may ask (a file in the state folder is not trusted)."""
        got = {k: data[k] for k in ("rank", "seed", "train_mlp", "train_attn", "train_unembed") if k in data}
        rank = got.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= MAX_LORA_RANK:
            raise ValueError(f"checkpoint record: lora rank must be an integer in 1..{MAX_LORA_RANK}, got {rank!r}")
        if any(not isinstance(got[k], bool) for k in ("train_mlp", "train_attn", "train_unembed") if k in got):
            raise ValueError("checkpoint record: lora train_mlp/train_attn/train_unembed must be true or false")
        if got.get("seed") is not None and (isinstance(got["seed"], bool) or not isinstance(got["seed"], int)):
            raise ValueError(f"checkpoint record: lora seed must be an integer, got {got['seed']!r}")
        return cls(**got)


def classify_linears(model: Any) -> dict[str, list[str]]:
    """Full names of the base model's linear layers, grouped as ``attn`` / ``mlp`` / ``unembed``."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    groups: dict[str, list[str]] = {"attn": [], "mlp": [], "unembed": []}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        path = name.lower().split(".")
        if module is head:
            groups["unembed"].append(name)
        elif any(p in part for part in path[:-1] for p in _MLP):
            groups["mlp"].append(name)
        elif any(p in part for part in path[:-1] for p in _ATTN):
            groups["attn"].append(name)
    return groups


def canonical(name: str, adapter: str) -> str | None:
    """``...q_proj.lora_A.<adapter>.weight`` -> ``...q_proj.lora_A.weight``; None for other tensors."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        if parts[i] == adapter and parts[i - 1].startswith("lora_"):
            return ".".join(parts[:i] + parts[i + 1:])
    return None


class ModelHost:
    """The peft-wrapped base model, its tokenizer, and the adapters living on it."""

    def __init__(self, model: Any, tokenizer: Any, *, lora_alpha: float = 32.0, max_sampler_adapters: int = 4) -> None:
        from peft import LoraConfig

        from memrl.models.peft_wrap import get_peft_model

        self.tokenizer = tokenizer
        self.lora_alpha = lora_alpha
        self.groups = classify_linears(model)
        if not self.groups["attn"] and not self.groups["mlp"]:
            raise ValueError("memrl tinker: found no attention or MLP linear layers to put LoRA on")
        # A permanent rank-1 adapter (B = 0: no effect) so that removing every tenant never leaves peft
        # without an adapter; the base model is reached with ``disable_adapter``.
        idle = LoraConfig(r=1, lora_alpha=1, target_modules=_regex((self.groups["attn"] or self.groups["mlp"])[:1]))
        self.model = get_peft_model(model, idle, adapter_name="idle")
        self.model.eval()
        self.max_sampler_adapters = max_sampler_adapters
        self._loaded_samplers: OrderedDict[str, str] = OrderedDict()  # sampler id -> adapter name
        self._forgotten: set[str] = set()  # samplers to unload at the worker's next sample request
        self._next = 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def targets(self, lora: LoraSpec) -> list[str]:
        names = []
        for flag, group in ((lora.train_attn, "attn"), (lora.train_mlp, "mlp"), (lora.train_unembed, "unembed")):
            names += self.groups[group] if flag else []
        if not names:
            raise ValueError("lora_config: train_attn, train_mlp and train_unembed adapt no layer of this model")
        return names

    def new_name(self, prefix: str) -> str:
        self._next += 1
        return f"{prefix}{self._next}"

    def add_adapter(self, name: str, lora: LoraSpec) -> dict[str, torch.nn.Parameter]:
        """Create adapter ``name`` (B = 0, so it starts as the base model); its tensors by canonical name."""
        from peft import LoraConfig

        if lora.rank < 1:
            raise ValueError(f"lora_config.rank must be >= 1, got {lora.rank}")
        cfg = LoraConfig(r=lora.rank, lora_alpha=self.lora_alpha, lora_dropout=0.0,
                         target_modules=_regex(self.targets(lora)))
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=lora.seed is not None), warnings.catch_warnings():
            # LoRA on a head tied to the input embedding adapts the head only: what train_unembed asks for.
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
            if lora.seed is not None:
                torch.manual_seed(lora.seed)
            self.model.add_adapter(name, cfg)
        return self.parameters(name)

    def parameters(self, adapter: str) -> dict[str, torch.nn.Parameter]:
        out = {}
        for n, p in self.model.named_parameters():
            key = canonical(n, adapter)
            if key is not None:
                out[key] = p
        return dict(sorted(out.items()))

    def remove_adapter(self, name: str) -> None:
        if name in self.model.peft_config:
            self.model.set_adapter("idle")
            self.model.delete_adapter(name)

    def state(self, adapter: str) -> dict[str, torch.Tensor]:
        """The adapter's tensors, detached copies on the CPU (a snapshot later training does not change)."""
        return {k: p.detach().to("cpu", copy=True) for k, p in self.parameters(adapter).items()}

    def load_state(self, adapter: str, tensors: dict[str, torch.Tensor]) -> None:
        """Copy ``tensors`` into the adapter; the names and shapes must be exactly the adapter's."""
        params = self.parameters(adapter)
        if set(params) != set(tensors):
            missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
            raise ValueError(f"the checkpoint's LoRA tensors do not match this model's adapter "
                             f"(missing {missing[:2]}, unexpected {extra[:2]})")
        with torch.no_grad():
            for key, p in params.items():
                if tuple(tensors[key].shape) != tuple(p.shape):
                    raise ValueError(f"{key}: checkpoint shape {tuple(tensors[key].shape)}, model {tuple(p.shape)}")
                p.copy_(tensors[key].to(p.device, p.dtype))

    @contextlib.contextmanager
    def active(self, adapter: str | None) -> Iterator[Any]:
        """The model with ``adapter`` active (``None``: the base model, every adapter off)."""
        if adapter is None:
            with self.model.disable_adapter():
                yield self.model
        else:
            self.model.set_adapter(adapter)
            yield self.model

    def sampler_adapter(self, sampler_id: str, lora: LoraSpec, weights: dict[str, torch.Tensor]) -> str:
        """The adapter holding a sampler's weights: loaded now if needed, evicting the least recently used.

        Called on the worker only (it changes the model); forgotten samplers are unloaded first."""
        for old in self._forgotten:
            self.drop_sampler(old)
        self._forgotten.clear()
        if sampler_id in self._loaded_samplers:
            self._loaded_samplers.move_to_end(sampler_id)
            return self._loaded_samplers[sampler_id]
        while len(self._loaded_samplers) >= self.max_sampler_adapters:
            _, old = self._loaded_samplers.popitem(last=False)
            self.remove_adapter(old)
        name = self.new_name("s")
        self.add_adapter(name, lora)
        try:
            self.load_state(name, weights)
        except Exception:
            self.remove_adapter(name)
            raise
        self._loaded_samplers[sampler_id] = name
        return name

    def forget_sampler(self, sampler_id: str) -> None:
        """Mark a sampler's adapter for unloading (from any thread: the worker unloads it later)."""
        self._forgotten.add(sampler_id)

    def drop_sampler(self, sampler_id: str) -> None:
        name = self._loaded_samplers.pop(sampler_id, None)
        if name is not None:
            self.remove_adapter(name)


def _regex(names: list[str]) -> str:
    """peft matches a string ``target_modules`` as a full regex over module names: exactly these layers."""
    return "^(?:" + "|".join(re.escape(n) for n in names) + ")$"


def optimizer_state(optimizer: torch.optim.Optimizer, params: dict[str, torch.nn.Parameter]) -> dict[str, torch.Tensor]:
    """AdamW's per-tensor state under ``<canonical name>::<field>`` (what ``optimizer.safetensors`` holds)."""
    out = {}
    for key, p in params.items():
        for field, value in optimizer.state.get(p, {}).items():
            out[f"{key}::{field}"] = torch.as_tensor(value).detach().cpu().clone()
    return out


def load_optimizer_state(optimizer: torch.optim.Optimizer, params: dict[str, torch.nn.Parameter],
                         tensors: dict[str, torch.Tensor]) -> None:
    """Put saved AdamW moments back on the adapter's tensors (``step`` stays a CPU scalar, as torch keeps it)."""
    loaded = {}
    for key, p in params.items():
        fields = {f.split("::", 1)[1]: t for f, t in tensors.items() if f.split("::", 1)[0] == key}
        for name, t in fields.items():  # a file in the state folder is not trusted: moments must fit their weight
            want = () if name == "step" else tuple(p.shape)
            if tuple(t.shape) != want and not (name == "step" and t.numel() == 1):
                raise ValueError(f"optimizer state {key}::{name} has shape {tuple(t.shape)}, the adapter's {want}")
        if fields:
            loaded[p] = {f: (t.float().cpu() if f == "step" else t.to(p.device, p.dtype)) for f, t in fields.items()}
    optimizer.state.update(loaded)  # all or nothing
