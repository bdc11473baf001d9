"""vLLM's CPU build with its linear layers in plain layout, so that a weight sync is an in-place copy.

Runs inside vLLM's worker processes (imported by :mod:`memrl.engines.vllm_worker` on demand).

Why: after loading, vLLM's CPU build repacks every unquantized linear layer for its GEMM
kernels (``dispatch_cpu_unquantized_gemm``: oneDNN matmul handles for the larger ones, sgl
VNNI packing for those under 1 MB) and drops the plain weight. New weights must then go
through vLLM's layerwise reload, which re-materializes each layer and packs it again;
measured on the 135M shape that repacking alone costs ~10-20x a ``memcpy`` of the same
bytes (``bench/weight_sync.py``), so no transport can bring a sync near memory speed.

In plain layout each linear (and LM head) keeps its ``[out, in]`` weight and multiplies
with ``torch.nn.functional.linear``, the fallback vLLM's own dispatcher uses where it has
no packed kernel. Every loaded tensor is then the served tensor: a sync is vLLM's weight
loaders copying the new values into the parameters (q/k/v and gate/up still fused by name),
with nothing left to process. The conversion happens once, after vLLM loaded the model:
each linear's quantization method becomes a subclass of vLLM's unquantized one that skips
the repacking, the packed layers get their plain parameters back (vLLM's own reload
metadata, recorded at load), and the checkpoint is reloaded from disk through vLLM's
layerwise reload. Only the stock unquantized methods are converted; a model with any other
weight processing (quantized layers, ...) keeps the layerwise reload for every sync.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from vllm.model_executor.layers.linear import UnquantizedLinearMethod
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod


def _plain(layer: torch.nn.Module) -> None:
    """Multiply with the layer's own weight (and a bias of its dtype: vLLM's packed small GEMMs keep it fp32)."""
    bias = getattr(layer, "bias", None)
    weight = getattr(layer, "weight", None)
    if isinstance(bias, torch.Tensor) and isinstance(weight, torch.Tensor) and bias.dtype != weight.dtype:
        bias.data = bias.data.to(weight.dtype)
    layer.cpu_linear = F.linear


class PlainLinearMethod(UnquantizedLinearMethod):
    """vLLM's unquantized linear method without the CPU repacking: the weight stays ``[out, in]``."""

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        _plain(layer)


class PlainEmbeddingMethod(UnquantizedEmbeddingMethod):
    """vLLM's unquantized embedding / LM-head method without the packed copy for the LM-head matmul."""

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        _plain(layer)


PLAIN = {UnquantizedLinearMethod: PlainLinearMethod, UnquantizedEmbeddingMethod: PlainEmbeddingMethod}


def to_plain(model: torch.nn.Module, reload: Any) -> int:
    """Switch ``model``'s stock unquantized linears and embeddings to plain layout, then ``reload()`` the
    checkpoint into them; returns how many layers changed."""
    from vllm.model_executor.model_loader.reload.layerwise import get_layerwise_info
    from vllm.model_executor.model_loader.reload.meta import materialize_layer, restore_layer_on_meta

    changed = 0
    for layer in model.modules():
        method = getattr(layer, "quant_method", None)
        plain = PLAIN.get(type(method))
        if plain is None:
            continue
        weight = getattr(layer, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.numel() == 0:  # packed, plain weight dropped
            info = get_layerwise_info(layer)
            if "weight" not in info.restore_metadata[0]:
                raise RuntimeError(f"vLLM kept no load-time metadata for {type(layer).__name__}: cannot unpack it")
            restore_layer_on_meta(layer, info)  # the parameters as created, with their weight loaders
            materialize_layer(layer, info)
        layer.quant_method = plain()
        _plain(layer)
        changed += 1
    reload()  # vLLM's reload from disk: every plain weight gets its checkpoint values
    return changed


def all_plain(model: torch.nn.Module) -> bool:
    """Whether no layer of ``model`` processes its weights after loading (every load is then final)."""
    for layer in model.modules():
        method = getattr(layer, "quant_method", None)
        if method is not None and type(method) not in (PlainLinearMethod, PlainEmbeddingMethod):
            return False
    return True


class _CopyProbe:
    """Records each ``copy_`` vLLM's weight loaders make (destination view, source) without copying."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        copies: list[tuple[torch.Tensor, torch.Tensor]] = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                if func is torch.ops.aten.copy_.default:
                    copies.append((args[0], args[1]))
                    return args[0]
                return func(*args, **(kwargs or {}))

        self.copies = copies
        self.mode = Mode()


def probe_targets(model: torch.nn.Module, layout: list[tuple[str, list[int], str]]) \
        -> dict[str, tuple[torch.nn.Parameter, int, torch.dtype]] | None:
    """Where vLLM's weight loaders put each checkpoint tensor of ``layout`` ``(name, shape, dtype)``:
    {name: (parameter, byte offset in it, its dtype)}, learnt by running ``model.load_weights`` on
    stand-ins whose copies are recorded, not made (the model keeps its values). A name the loaders skip
    (a tied ``lm_head``) has no entry. None where some tensor is not copied as-is into one contiguous
    slice of one parameter (a transposed, split or quantized load): then only the loaders can load it.
    """
    by_storage = {p.untyped_storage().data_ptr(): p for p in model.parameters()  # each owning all its storage
                  if p.is_contiguous() and p.storage_offset() == 0
                  and p.numel() * p.element_size() == p.untyped_storage().nbytes()}
    pools = {dtype: torch.empty(len(layout), dtype=getattr(torch, dtype)) for _, _, dtype in layout}
    stand_ins = {}
    for i, (name, shape, dtype) in enumerate(layout):  # one element each, seen at every index: no memory
        stand_ins[name] = pools[dtype][i:i + 1].view(()).expand(shape) if shape else pools[dtype][i]
    probe = _CopyProbe()
    with torch.no_grad(), probe.mode:
        model.load_weights(iter(stand_ins.items()))  # type: ignore[operator]
    source = {(t.data_ptr(), t.dtype): name for name, t in stand_ins.items()}
    targets: dict[str, tuple[torch.nn.Parameter, int, torch.dtype]] = {}
    for dst, src in probe.copies:
        name = source.get((src.data_ptr(), src.dtype))
        param = by_storage.get(dst.untyped_storage().data_ptr())
        if name is None or param is None or name in targets or not dst.is_contiguous() \
                or tuple(src.shape) != tuple(stand_ins[name].shape) or src.stride() != stand_ins[name].stride():
            return None
        targets[name] = (param, dst.data_ptr() - param.data_ptr(), dst.dtype)
    return targets


def share_params(targets: dict[str, tuple[torch.nn.Parameter, int, torch.dtype]], shapes: dict[str, list[int]],
                 root: str, align: int = 64) -> tuple[str, int, list[tuple[str, int, str, list[int]]]]:
    """Move the parameters ``targets`` point into to one new file in ``root`` (shared memory) and make each a
    view of it: whoever maps the file writes the served weights. Returns (path, size, [(name, byte offset,
    dtype, shape)]); the caller maps the file and removes its name."""
    import os
    import tempfile

    placed: dict[int, int] = {}  # id(param) -> its offset in the file
    params: list[torch.nn.Parameter] = []
    size = 0
    for param, _, _ in targets.values():
        if id(param) not in placed:
            placed[id(param)] = size
            params.append(param)
            size += -(-param.numel() * param.element_size() // align) * align
    entries = sorted((placed[id(p)] + off, name, str(dt).removeprefix("torch."))
                     for name, (p, off, dt) in targets.items())
    end = 0
    for off, name, dtype in entries:  # two names writing one byte would make the order of writes matter
        if off < end:
            raise RuntimeError(f"{name} overlaps the tensor before it in the engine's parameters")
        n = getattr(torch, dtype).itemsize
        for s in shapes[name]:
            n *= s
        end = off + n
    fd, path = tempfile.mkstemp(prefix="memrl-weights-", dir=root)
    try:
        os.ftruncate(fd, max(size, 1))
    finally:
        os.close(fd)
    buf = torch.from_file(path, shared=True, size=max(size, 1), dtype=torch.uint8)
    with torch.no_grad():
        for param in params:
            off, n = placed[id(param)], param.numel() * param.element_size()
            view = buf[off: off + n].view(param.dtype).view(param.shape)
            view.copy_(param.data)
            param.data = view
    return path, max(size, 1), [(name, off, dtype, list(shapes[name])) for off, name, dtype in entries]
