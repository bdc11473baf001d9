"""How an engine kind runs inside a rollout replica (a process of its own, e.g. a Ray actor).

A replica builds its engine from the model path and the run's config, loads the trainer's
start-up weights, and in colocated placement gives the accelerator back during the update
(``sleep``) and takes it again after (``wake``). What that means differs per kind, so each
kind that can run in a replica registers a ``replica`` builder (see
:func:`memrl.engines.factory.register_engine`) returning a :class:`Hosted`; the replica
(``memrl.dist.pool``) only calls these methods and never asks which kind it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memrl.engines.base import Engine


class Hosted:
    """An engine in a replica process: ``engine`` serves requests on ``device``; ``pending`` holds start-up
    weights not loaded yet (engines whose loading is async load them on the first request)."""

    engine: Engine
    device: str = "cpu"
    pending: Mapping[str, Any] | None = None

    async def ready(self) -> None:
        """Load the pending start-up weights, once."""
        if self.pending is not None:
            weights, self.pending = self.pending, None
            await self.engine.update_weights(weights)

    async def sleep(self) -> None:
        """Colocated placement: give the accelerator back to the trainer during the update."""

    async def wake(self) -> None:
        """Colocated placement: take the accelerator again after the update."""


def _stop_reader(spec: str) -> Any:
    """The tokenizer that lets the engine end a completion on a stop string, or None where it does not load
    (the caller trims the text either way: without it only the early end is lost)."""
    from memrl.models.resolve import ModelNotFoundError, load_tokenizer

    try:
        return load_tokenizer(spec)
    except (ModelNotFoundError, OSError, ValueError):
        return None


class HostedHF(Hosted):
    """memrl's batching HF engine on ``device`` (the CPU by default); sleeping moves the model to host memory."""

    def __init__(self, model_path: str, dtype: str, device: str | None, weights: Mapping[str, Any] | None,
                 max_batch_size: int, seed: int, options: Mapping[str, Any] | None = None) -> None:
        from memrl.engines.hf import HFEngine
        from memrl.models.resolve import load_model

        self.device = device or "cpu"
        self.model = load_model(model_path, dtype=dtype, device=self.device)
        if weights is not None:
            self.model.load_state_dict(weights, strict=False)
        self.model.eval()
        pad = getattr(self.model.config, "pad_token_id", None)
        config = (options or {}).get("config") or {}
        engine = dict(config.get("engine") or {})  # the run's engine section
        self.engine = HFEngine(self.model, pad_token_id=pad, max_batch_size=max_batch_size, seed=seed,
                               decode=engine.get("decode", "auto"),
                               continuous_batching=engine.get("continuous_batching", False),
                               tokenizer=_stop_reader((config.get("model") or {}).get("tokenizer") or model_path))

    async def sleep(self) -> None:
        if self.device != "cpu":
            import torch

            self.engine.release_static()
            self.model.to("cpu")
            torch.cuda.empty_cache()

    async def wake(self) -> None:
        if self.device != "cpu":
            self.model.to(self.device)


class HostedVLLM(Hosted):
    """In-process vLLM built from the run's config (``options["config"]``), tensor-parallel over the replica's
    GPUs; its weights load on the first request (vLLM's weight loading is async); sleeping is vLLM's level-1
    sleep (weights to host memory, KV cache dropped)."""

    def __init__(self, model_path: str, dtype: str, device: str | None, weights: Mapping[str, Any] | None,
                 max_batch_size: int, seed: int, options: Mapping[str, Any] | None = None) -> None:
        from memrl.config.schema import MemRLConfig
        from memrl.engines.vllm import VLLMEngine
        from memrl.engines.vllm_args import on_cpu, require_vllm

        require_vllm()
        cfg = MemRLConfig.model_validate((options or {})["config"])
        if cfg.engine.tensor_parallel_size > 1:
            # the actor already holds its GPUs: vLLM's workers are its own processes, not more Ray actors
            cfg.engine.vllm.args = {"distributed_executor_backend": "mp", **cfg.engine.vllm.args}
        self.engine = VLLMEngine.from_config(cfg, model_path)
        self.device = "cpu" if on_cpu() else "cuda"  # the platform vLLM runs on (its CPU build, or CUDA)
        self.pending = weights

    async def sleep(self) -> None:
        await self.engine.sleep(1)  # type: ignore[attr-defined]

    async def wake(self) -> None:
        await self.engine.wake_up()  # type: ignore[attr-defined]


def vllm_replica_gpus(cfg: Any) -> int:
    """GPUs one vLLM replica asks Ray for: its tensor-parallel size on CUDA, none on vLLM's CPU build."""
    from memrl.engines.vllm_args import on_cpu, require_vllm

    require_vllm()
    return 0 if on_cpu() else cfg.engine.tensor_parallel_size
