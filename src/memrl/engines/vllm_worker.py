"""Code that runs *inside* vLLM's worker processes: receiving new weights during RL.

vLLM mixes this class into its worker (``worker_extension_cls``), and memrl calls
its methods by name through ``AsyncLLM.collective_rpc``. Only names, plain values
and bytes cross the process boundary: vLLM refuses to ship Python functions unless
insecure serialization is on, and tensors sent as RPC arguments arrive as lists.

Two ways in, both ending in vLLM's own checkpoint-format reload (the model's
``load_weights`` with vLLM's per-layer bookkeeping: name remapping, fused q/k/v and
gate/up projections, tied embeddings, CPU weight packing):

* **Shared memory** (``memrl_begin_update`` / ``memrl_load_bucket`` /
  ``memrl_finish_update``): the trainer writes a bucket of whole layers into a file
  in ``/dev/shm``; the worker maps the file (no copy, the mapping is kept for the
  next sync) and hands views of it to ``load_weights``. This is the lifecycle of
  vLLM's own IPC/NCCL weight-transfer engines (layerwise reload opened before the
  first bucket, finalized after the last), with a file mapping as the transport.
  Buckets hold whole layers, so a layer is normally complete, processed and copied into
  the model's own tensors before the trainer reuses the bucket's file; the rare layer
  left waiting (vLLM pads some embeddings beyond the checkpoint's rows) gets copies.
* **Bytes** (``memrl_stage_weights`` / ``memrl_apply_weights``): safetensors-serialized
  buckets through the RPC channel, staged and applied in one ``reload_weights``: the
  fallback where no shared file system reaches the worker.

The GPU paths (CUDA IPC, NCCL) use vLLM's built-in weight-transfer engines
(``weight_transfer_config``); ``memrl_device_uuid`` tells the trainer which GPU
each worker holds, to check that IPC handles will open there.

This module imports nothing from memrl so that workers start without it.
"""

from __future__ import annotations

from typing import Any


class MemrlWorkerExtension:
    """Methods vLLM adds to every worker; ``self`` is the vLLM worker."""

    # -- bytes over RPC ------------------------------------------------------------------------
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

    # -- shared memory -------------------------------------------------------------------------
    def memrl_begin_update(self) -> None:
        """Open a layerwise reload: each layer is rebuilt once all its weights have arrived (in plain layout
        every load is final: nothing to open)."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        self.__dict__["_memrl_updating"] = True
        if self.__dict__.get("_memrl_direct"):
            return
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            initialize_layerwise_reload(self.model_runner.get_model())  # type: ignore[attr-defined]

    def memrl_load_bucket(self, path: str, size: int, names: list[str], dtypes: list[str],
                          shapes: list[list[int]], offsets: list[int]) -> int:
        """Load one bucket of whole layers from the shared file ``path`` (views, no copy); returns its bytes."""
        import torch
        from vllm.config import set_current_vllm_config

        if not self.__dict__.get("_memrl_updating"):
            raise RuntimeError("memrl_load_bucket before memrl_begin_update")
        buf = self._memrl_mapping(path, size)
        weights = []
        for name, dtype, shape, off in zip(names, dtypes, shapes, offsets, strict=True):
            dt = getattr(torch, dtype)
            n = dt.itemsize
            for s in shape:
                n *= s
            weights.append((name, buf[off: off + n].view(dt).view(shape)))
        direct = bool(self.__dict__.get("_memrl_direct"))
        pending = [] if direct else _pending_loads()
        if pending is None:  # this vLLM buffers loads where we cannot see them: hand over copies, not views
            weights = [(name, w.clone()) for name, w in weights]
        with set_current_vllm_config(self.vllm_config), _no_mtp_check():  # type: ignore[attr-defined]
            self.model_runner.get_model().load_weights(weights)  # type: ignore[attr-defined]
        if pending is not None and not direct:
            _detach_from(buf, _pending_loads() or [])
        return sum(int(w.nbytes) for _, w in weights)

    def memrl_finish_update(self) -> None:
        """Close the layerwise reload (layers left incomplete keep their old weights) and drop derived caches."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        if not self.__dict__.pop("_memrl_updating", False):
            return
        runner = self.model_runner  # type: ignore[attr-defined]
        if not self.__dict__.get("_memrl_direct"):
            with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
                finalize_layerwise_reload(runner.get_model(), self.model_config)  # type: ignore[attr-defined]
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
            getattr(runner, reset, lambda: None)()

    def memrl_release_shm(self, path: str | None = None) -> None:
        """Unmap the shared file ``path`` (all of them: None); the trainer no longer writes it."""
        maps: dict[str, Any] = self.__dict__.setdefault("_memrl_maps", {})
        if path is None:
            maps.clear()
        else:
            maps.pop(path, None)

    def _memrl_mapping(self, path: str, size: int) -> Any:
        """The file at ``path`` mapped shared (kept across syncs: its pages stay mapped, no faults next time)."""
        import torch

        maps: dict[str, Any] = self.__dict__.setdefault("_memrl_maps", {})
        buf = maps.get(path)
        if buf is None or buf.numel() < size:
            buf = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
            maps[path] = buf
        return buf

    # -- CPU layout ----------------------------------------------------------------------------
    def memrl_plain_layout(self) -> tuple[int, bool]:
        """Keep the linear layers' weights plain (vLLM's CPU build packs them), so that each later load is an
        in-place copy (:mod:`memrl.engines.vllm_plain`); returns (layers changed, whether loads are now final)."""
        from vllm.config import set_current_vllm_config
        from vllm.platforms import current_platform

        from memrl.engines.vllm_plain import all_plain, to_plain

        if not current_platform.is_cpu():
            raise RuntimeError("the plain weight layout is for vLLM's CPU build")
        if not self.model_config.enforce_eager:  # type: ignore[attr-defined]
            raise RuntimeError("the plain weight layout needs enforce_eager: a compiled model keeps its packed GEMMs")
        runner = self.model_runner  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            changed = to_plain(runner.get_model(), runner.reload_weights)
        direct = all_plain(runner.get_model())
        self.__dict__["_memrl_direct"] = direct
        return changed, direct

    def memrl_share_weights(self, names: list[str], shapes: list[list[int]], dtypes: list[str],
                            root: str) -> tuple[str, int, list[Any]] | None:
        """Plain layout: move the parameters these checkpoint tensors load into to one shared file in ``root``;
        returns (path, size, [(name, byte offset, dtype, shape)]) for the trainer to write new weights
        straight into the served ones, or None where some tensor cannot be written as-is."""
        from vllm.config import set_current_vllm_config

        from memrl.engines.vllm_plain import probe_targets, share_params

        if not self.__dict__.get("_memrl_direct"):
            return None
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config), _no_mtp_check():  # type: ignore[attr-defined]
            targets = probe_targets(model, list(zip(names, shapes, dtypes, strict=True)))
        if targets is None:
            return None
        return share_params(targets, dict(zip(names, shapes, strict=True)), root)

    # -- placement -----------------------------------------------------------------------------
    def memrl_device_uuid(self) -> str:
        """This worker's GPU (physical UUID), or '' off CUDA: where CUDA IPC handles must point."""
        import torch

        device = getattr(self, "device", None)
        if device is None or getattr(device, "type", "cpu") != "cuda":
            return ""
        return str(torch.cuda.get_device_properties(device).uuid)


def _pending_loads() -> list[Any] | None:
    """Loads vLLM's layerwise reload still holds for layers not complete yet (their arguments), or None
    where this vLLM keeps them elsewhere."""
    try:
        from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO
    except ImportError:
        return None
    pending = []
    for info in list(LAYERWISE_INFO.values()):
        loaded = getattr(info, "loaded_weights", None)
        if loaded is None:
            return None
        pending += [bound for _, bound in loaded]
    return pending


def _detach_from(buf: Any, pending: list[Any]) -> int:
    """Replace tensors in ``pending`` that view ``buf`` with copies; returns the bytes copied.

    A layer that one bucket leaves incomplete (e.g. an embedding vLLM pads beyond the checkpoint's
    rows, finished only by ``finalize``) keeps its loads until later; the trainer reuses the file
    for a later bucket meanwhile, so those loads must not point into it.
    """
    import torch

    lo, hi, copied = buf.data_ptr(), buf.data_ptr() + buf.numel(), 0
    for bound in pending:
        for key, value in list(bound.arguments.items()):
            if isinstance(value, torch.Tensor) and lo <= value.data_ptr() < hi:
                bound.arguments[key] = value.clone()
                copied += int(value.nbytes)
    return copied


def _no_mtp_check() -> Any:
    """vLLM's guard that skips the multi-token-prediction completeness check for partial loads (where present)."""
    from contextlib import nullcontext

    try:
        from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check
    except ImportError:
        return nullcontext()
    return disable_mtp_completeness_check()
