"""In-process vLLM engine: ``AsyncLLM`` with token-id prompts, logprobs and weight sync.

Optional: ``pip install 'memrl[vllm]'`` on GPUs, vLLM's CPU build elsewhere.

Three things make it usable for RL rather than for serving only:

* **Its own event loop.** An ``AsyncLLM`` stays bound to the loop that first used it,
  while the trainer, ``memrl eval`` and ``memrl serve`` each run their own loops (the
  trainer one per phase). The engine therefore lives on a loop in a thread of its own,
  and every call, from whatever loop, is forwarded there; cancelling the caller cancels
  the request inside vLLM.
* **Weight sync by name, at memory speed.** New weights reach the workers by the
  fastest path that applies (:mod:`memrl.engines.vllm_sync`): CUDA IPC handles when
  the engine shares the trainer's GPU, an NCCL broadcast when it has GPUs of its own
  (both through vLLM's weight-transfer engines), buckets of whole layers in shared
  memory otherwise, and safetensors bytes through ``collective_rpc`` as the fallback.
  The workers load them by name with vLLM's layerwise reload; on a CPU in plain layout
  (``engine.vllm.cpu_layout=plain``) the trainer instead writes them straight into the
  served parameters (:mod:`memrl.engines.vllm_inplace`). The prefix cache is
  reset afterwards (its keys/values belong to the old weights). LoRA runs can instead
  ship only the adapter (``engine.vllm.lora_sync=adapter``), loaded as a vLLM LoRA request.
* **A dead engine says so.** vLLM's ``EngineDeadError`` becomes memrl's
  :class:`~memrl.engines.base.EngineDeadError`, which stops ``memrl train``/``eval``
  instead of being counted as one more failed episode.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from memrl.engines.base import EngineDeadError, GenerationResult, SamplingParams
from memrl.engines.vllm_args import require_vllm, to_vllm_params, vllm_result
from memrl.engines.vllm_inplace import InPlaceSync
from memrl.engines.vllm_sync import ShmSlots, shm_root, sync_shm, weight_buckets

T = TypeVar("T")

__all__ = ["VLLMEngine", "require_vllm", "to_vllm_params", "weight_buckets"]


class VLLMEngine:
    """The Engine protocol over one ``AsyncLLM``, callable from any event loop or thread."""

    def __init__(self, engine_args: Mapping[str, Any], *, sleep_enabled: bool = False,
                 bucket_bytes: int = 256 * 2**20, sync_path: str = "bytes", trainer_gpu: int | None = None,
                 cpu_layout: str = "packed") -> None:
        require_vllm()
        self.cpu_layout = cpu_layout  # "plain": vLLM's CPU build keeps plain linear weights (vllm_plain)
        self.direct_loads = False  # whether a sync is an in-place copy (plain layout took everywhere)
        self.sleep_enabled = sleep_enabled
        self.bucket_bytes = bucket_bytes
        self.sync_path = sync_path  # chosen by memrl.engines.vllm_sync.choose_path
        self.trainer_gpu = trainer_gpu
        self.last_sync_path = ""
        self._slots: ShmSlots | None = None
        self._inplace: InPlaceSync | None = None  # plain layout, one worker: syncs write the served weights
        self._nccl: Any = None
        self._ipc_checked = False
        self._ipc_open = False
        self._tensor_parallel = int(engine_args.get("tensor_parallel_size", 1))
        if sync_path == "ipc":
            # IPC handles hold Python objects: vLLM lets them through its RPC channel (a local socket between
            # this process and its own engine) only with this switch, as vLLM's own IPC example sets it
            os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
        self.lora_enabled = bool(engine_args.get("enable_lora"))
        self.logprobs_mode = str(engine_args.get("logprobs_mode", "raw_logprobs"))  # vLLM's default when unset
        self.weight_version = 0
        self.last_sync: dict[str, float] = {}
        self._ids = itertools.count()
        self._tag = uuid.uuid4().hex[:8]
        self._inflight: set[str] = set()  # request ids now generating (touched on the engine's loop only)
        self._lora: Any = None
        self._lora_root: Path | None = None
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memrl-vllm", daemon=True)
        self._thread.start()
        try:
            self.engine = asyncio.run_coroutine_threadsafe(self._start(dict(engine_args)), self._loop).result()
            if cpu_layout == "plain":
                asyncio.run_coroutine_threadsafe(self._plain_layout(), self._loop).result()
        except BaseException:
            self._stop_loop()
            raise
        atexit.register(self.shutdown)

    @classmethod
    def from_config(cls, cfg: Any, model_path: str | None = None, *, colocated: bool | None = None) -> VLLMEngine:
        """Build from a :class:`~memrl.config.schema.MemRLConfig` (``engine.vllm`` options)."""
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # read when vLLM is first imported
        require_vllm()
        from memrl.config import ConfigError
        from memrl.engines.vllm_args import build_engine_args, check_cpu_layout, check_extra_args, engine_arg_names, \
            filtering_notice, on_cpu, plan_sync_path, sleep_available
        from memrl.models.resolve import resolve_model_path

        o = cfg.engine.vllm
        check_extra_args(o.args, engine_arg_names())
        colocated = cfg.cluster.placement == "colocate" if colocated is None else colocated
        available = sleep_available()
        if o.sleep == "on" and not available:
            raise ConfigError("engine.vllm.sleep=on, but vLLM has no sleep mode on this platform; use auto or off")
        sleep = o.sleep == "on" or (o.sleep == "auto" and available and colocated)
        if o.sleep == "auto" and colocated and not available:
            print("note: vLLM sleep mode is not available on this platform; the engine keeps its memory "
                  "during updates", file=sys.stderr)
        path = resolve_model_path(model_path or cfg.model.path)
        sync_path, trainer_gpu = plan_sync_path(cfg)
        args = build_engine_args(cfg, path, cpu=on_cpu(), sleep=sleep, sync_path=sync_path)
        layout = check_cpu_layout(o.cpu_layout, cpu=on_cpu(), engine_args=args)
        notice = filtering_notice(str(args["logprobs_mode"]), cfg.sampling.top_p, cfg.sampling.top_k)
        if notice:
            print(notice, file=sys.stderr)
        return cls(args, sleep_enabled=sleep, bucket_bytes=o.bucket_mb * 2**20, sync_path=sync_path,
                   trainer_gpu=trainer_gpu, cpu_layout=layout)

    @classmethod
    def from_pretrained(cls, model: str, dtype: str = "auto", sync_path: str = "bytes",
                        trainer_gpu: int | None = None, cpu_layout: str = "packed", **engine_args: Any) -> VLLMEngine:
        """A model with vLLM-default options plus ``engine_args`` (any ``AsyncEngineArgs`` field).

        ``sync_path`` ``ipc``/``nccl`` starts vLLM's weight-transfer engine of that backend;
        ``trainer_gpu``: the CUDA device the weights are sent from; ``cpu_layout``: ``engine.vllm.cpu_layout``.
        """
        from memrl.engines.vllm_args import LOGPROBS_MODE, WORKER_EXTENSION
        from memrl.models.resolve import resolve_model_path

        args = {"model": resolve_model_path(model), "dtype": dtype, "worker_extension_cls": WORKER_EXTENSION,
                "logprobs_mode": LOGPROBS_MODE, **engine_args}
        if sync_path in ("ipc", "nccl"):
            args.setdefault("weight_transfer_config", {"backend": sync_path})
        return cls(args, sleep_enabled=bool(args.get("enable_sleep_mode")), sync_path=sync_path,
                   trainer_gpu=trainer_gpu, cpu_layout=cpu_layout)

    # -- the engine's own loop -----------------------------------------------------------------
    async def _start(self, kw: dict[str, Any]) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kw))

    async def _plain_layout(self) -> None:
        """memrl.engines.vllm_plain in every worker: each later load is final where all the model's layers took it."""
        try:
            self.direct_loads = all(d for _, d in await self.engine.collective_rpc("memrl_plain_layout"))
        except BaseException:
            self.engine.shutdown()
            raise
        if self.direct_loads and self._tensor_parallel == 1:
            self._inplace = InPlaceSync(shm_root() or tempfile.gettempdir())

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the engine's loop and wait for it on the caller's loop."""
        if self._closed:
            coro.close()
            raise EngineDeadError("the vLLM engine was shut down")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._guard(coro), self._loop))

    async def _guard(self, coro: Coroutine[Any, Any, T]) -> T:
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMDead

        if self.engine.errored:
            coro.close()
            raise EngineDeadError(f"the vLLM engine died: {self.engine.dead_error}")
        try:
            return await coro
        except VLLMDead as exc:
            raise EngineDeadError(f"the vLLM engine died: {exc}") from exc

    # -- generation ----------------------------------------------------------------------------
    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        return await self._call(self._generate(list(prompt_ids), params))

    async def _generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult:
        import vllm

        start = self.weight_version
        if params.max_new_tokens == 0:  # vLLM refuses max_tokens 0; the HF engine answers it empty
            return GenerationResult([], [], "length", {"weight_version": start})
        sp = vllm.SamplingParams(**to_vllm_params(params))
        final, reason, rid = None, None, f"memrl-{self._tag}-{next(self._ids)}"
        self._inflight.add(rid)
        try:
            async for out in self.engine.generate({"prompt_token_ids": prompt_ids}, sp, request_id=rid,
                                                  lora_request=self._lora):
                reason = out.outputs[0].finish_reason
                if final is None or len(out.outputs[0].token_ids) >= len(final.outputs[0].token_ids):
                    final = out  # cumulative outputs: an abort's last one may carry no tokens
        finally:
            self._inflight.discard(rid)
        # the version that sampled it, as the HF engine records; a sync made while it ran (outside the trainer's
        # gate, which waits or aborts) gives it tokens of both: both versions are recorded
        meta: dict[str, Any] = {"weight_version": self.weight_version}
        if self.weight_version != start:
            meta["weight_versions"] = [start, self.weight_version]
        return vllm_result(final, reason, meta)

    def interrupt(self) -> None:
        """Abort every request in flight; each returns the tokens it has (finish reason ``"abort"``), as
        AReaL's pause does before a weight update. Safe from any thread."""
        if not self._closed:
            asyncio.run_coroutine_threadsafe(self._abort_inflight(), self._loop)

    async def _abort_inflight(self) -> None:
        if self._inflight:
            await self.engine.abort(list(self._inflight))

    # -- weight sync ---------------------------------------------------------------------------
    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Replace the served weights (full model, checkpoint names) and drop cached prefixes."""
        t0 = time.perf_counter()
        if self.sync_path == "nccl":
            if self._closed:
                raise EngineDeadError("the vLLM engine was shut down")
            sent = await asyncio.to_thread(self._nccl_link().send, state_dict)
            await self._call(self._reset_cache())
        else:
            sent = await self._call(self._update_weights(state_dict))
        self.weight_version += 1
        self._record_sync(self.sync_path, sent, time.perf_counter() - t0)

    async def _reset_cache(self) -> None:
        """Drop every cached prefix, running requests' too: vLLM refuses a plain reset while a request holds
        cache blocks (it returns False), and a prompt cached under the old weights would then be read again
        under the new ones. Running requests are recomputed from their tokens (vLLM preempts them)."""
        if not await self.engine.reset_prefix_cache(reset_running_requests=True):
            print("warning: vLLM did not reset its prefix cache after a weight sync: a prompt cached before it "
                  "is read under the old weights until the cache turns over", file=sys.stderr, flush=True)

    @property
    def in_place(self) -> bool:
        """Whether syncs write straight into the served parameters (plain layout, after the first sync)."""
        return self._inplace is not None and self._inplace.shared is not None

    def _record_sync(self, path: str, sent: int, seconds: float) -> None:
        self.last_sync_path = path
        self.last_sync = {"sync_mb": sent / 2**20, "time/sync_engine": seconds,
                          "sync/gb_per_s": sent / 1e9 / max(seconds, 1e-9)}

    async def _update_weights(self, state_dict: Mapping[str, Any]) -> int:
        if self.sync_path == "ipc" and not await self._ipc_reaches_workers():
            self._fall_back("the engine's workers are not on the trainer's GPU")
        if self.sync_path == "ipc":
            from memrl.engines.vllm_gpu_sync import open_ipc, sync_ipc

            if not self._ipc_open:  # the handshake: the workers decode packed buckets from now on
                await open_ipc(self.engine)
                self._ipc_open = True
            sent = await sync_ipc(self.engine, state_dict, self.bucket_bytes, f"cuda:{self.trainer_gpu or 0}")
        elif self.sync_path == "shm" and self._inplace is not None and await self._inplace.applies(self.engine,
                                                                                                      state_dict):
            sent = await self._inplace.sync(self.engine, state_dict)
        elif self.sync_path == "shm":
            if self._slots is None:
                self._slots = ShmSlots(shm_root() or tempfile.gettempdir())
            sent = await sync_shm(self.engine, state_dict, self._slots, self.bucket_bytes)
        else:
            sent = await self._send_bytes(state_dict)
        await self._reset_cache()
        return sent

    async def _send_bytes(self, state_dict: Mapping[str, Any]) -> int:
        """Safetensors bytes through the RPC channel, staged by the workers and applied together."""
        from safetensors.torch import save

        sent = 0
        try:
            for bucket in weight_buckets(state_dict, self.bucket_bytes):
                payload = save(bucket)
                await self.engine.collective_rpc("memrl_stage_weights", args=(payload,))
                sent += len(payload)
        except BaseException:
            await self.engine.collective_rpc("memrl_discard_staged")
            raise
        await self.engine.collective_rpc("memrl_apply_weights")
        return sent

    async def _ipc_reaches_workers(self) -> bool:
        """Whether every worker holds the trainer's GPU (asked once): IPC handles open only there."""
        if self._ipc_checked:
            return True
        import torch

        mine = str(torch.cuda.get_device_properties(self.trainer_gpu or 0).uuid)
        theirs = await self.engine.collective_rpc("memrl_device_uuid")
        self._ipc_checked = all(u == mine for u in theirs)
        return self._ipc_checked

    def _fall_back(self, why: str) -> None:
        path = "shm" if shm_root() else "bytes"
        print(f"note: vLLM weight sync uses {path} instead of {self.sync_path}: {why}", file=sys.stderr)
        self.sync_path = path

    def _nccl_link(self) -> Any:
        if self._nccl is None:
            from memrl.engines.vllm_gpu_sync import NcclLink, run_on

            self._nccl = NcclLink(self.engine, run_on(self._loop), self._tensor_parallel, self.bucket_bytes,
                                  f"cuda:{self.trainer_gpu or 0}")
        return self._nccl

    async def update_adapter(self, tensors: Mapping[str, Any], adapter_config: Mapping[str, Any]) -> None:
        """Serve base weights + this LoRA adapter (peft names and config), replacing the previous adapter."""
        if not self.lora_enabled:
            raise RuntimeError("this vLLM engine was started without LoRA (engine.vllm.lora_sync=adapter)")
        await self._call(self._update_adapter(tensors, adapter_config))

    async def _update_adapter(self, tensors: Mapping[str, Any], adapter_config: Mapping[str, Any]) -> None:
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        t0 = time.perf_counter()
        if self._lora_root is None:
            self._lora_root = Path(tempfile.mkdtemp(prefix="memrl-lora-"))
        version = self.weight_version + 1
        folder = self._lora_root / f"v{version}"
        folder.mkdir()
        tensors_cpu = {k: v for b in weight_buckets(tensors, 2**62) for k, v in b.items()}
        save_file(tensors_cpu, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(json.dumps(dict(adapter_config), default=list))
        request = LoRARequest(lora_name=f"memrl-v{version}", lora_int_id=version, lora_path=str(folder))
        await self.engine.add_lora(request)
        old, self._lora = self._lora, request
        if old is not None:
            await self.engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        await self._reset_cache()
        self.weight_version = version
        size = (folder / "adapter_model.safetensors").stat().st_size
        self._record_sync("adapter", size, time.perf_counter() - t0)

    # -- memory --------------------------------------------------------------------------------
    async def sleep(self, level: int = 1) -> None:
        """Free accelerator memory (weights/KV cache) while the trainer updates; a no-op without sleep mode."""
        if self.sleep_enabled:
            await self._call(self.engine.sleep(level))

    async def wake_up(self) -> None:
        if self.sleep_enabled:
            await self._call(self.engine.wake_up())

    # -- shutdown ------------------------------------------------------------------------------
    async def close(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Stop vLLM's processes and the loop thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._thread.is_alive():  # vLLM's own tasks live on that loop: stop them there
                asyncio.run_coroutine_threadsafe(self._shutdown_on_loop(), self._loop).result(timeout=60)
            else:
                self.engine.shutdown()
            self.engine = None  # collected now, while the interpreter is intact (its __del__ shuts down again)
        finally:
            self._stop_loop()
            if self._lora_root is not None:
                shutil.rmtree(self._lora_root, ignore_errors=True)
            if self._slots is not None:
                self._slots.close()
            if self._inplace is not None:
                self._inplace.close()

    async def _shutdown_on_loop(self) -> None:
        if self._nccl is not None:
            self._nccl.close()
        self.engine.shutdown()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
