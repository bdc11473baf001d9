"""The CUDA paths of the vLLM weight sync, on vLLM's own weight-transfer engines.

An engine started with ``weight_transfer_config={"backend": "ipc"}`` or ``"nccl"``
receives weights through ``init_weight_transfer_engine`` / ``start_weight_update`` /
``update_weights`` / ``finish_weight_update`` (vLLM's RLHF interface); the worker side
is vLLM's ``IPCWeightTransferEngine`` / ``NCCLWeightTransferEngine``. This module is the
trainer's end:

* **IPC** (the engine on the trainer's GPU): each bucket of whole layers is packed into
  one GPU buffer (allocated once per sync, so the extra memory is one bucket), whose CUDA
  IPC handle the worker opens; vLLM's packed IPC format (names, dtype names, shapes,
  byte sizes back to back). The handles hold Python objects, so the engine's RPC channel
  must allow pickled payloads (``VLLM_ALLOW_INSECURE_SERIALIZATION=1``, as vLLM's own
  IPC example sets); it is a local socket between this process and its own engine.
* **NCCL** (the engine on other GPUs): vLLM's ``NCCLTrainerWeightTransferEngine`` as rank 0
  of a stateless process group with the workers (``1 + tensor_parallel_size`` ranks),
  packed double-buffered broadcasts of ``bucket_bytes``.

Both pause the engine's scheduler (requests in flight are kept, not aborted) while the
layers are swapped, as vLLM's RLHF examples do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any

from memrl.engines.vllm_sync import Bucket, plan_buckets


IPC_INIT = {"packed": True}  # vLLM's IPCWeightTransferInitInfo: buckets travel packed in one buffer


def ipc_update_info(bucket: Bucket, handle: dict[str, Any]) -> dict[str, Any]:
    """vLLM's packed IPC update for one bucket (``IPCWeightTransferUpdateInfo`` fields)."""
    return {"names": bucket.names, "dtype_names": bucket.dtypes, "shapes": bucket.shapes, "ipc_handles": handle,
            "tensor_sizes": bucket.sizes}


def ipc_plan(state: Mapping[str, Any], bucket_bytes: int) -> tuple[list[Any], list[Bucket]]:
    """(tensors, buckets packed back to back) for the IPC path: vLLM's consumer splits by byte sizes, so a
    tied tensor travels twice."""
    items = list(state.items())
    return [t for _, t in items], plan_buckets([(n, t.shape, t.dtype) for n, t in items], bucket_bytes, align=1)


def pack_bucket(buf: Any, bucket: Bucket, tensors: list[Any]) -> None:
    """Copy the bucket's tensors (any device) byte for byte into ``buf`` (uint8) at their offsets."""
    import torch

    with torch.no_grad():
        for i, off, size in zip(bucket.indices, bucket.offsets, bucket.sizes, strict=True):
            buf[off: off + size].copy_(tensors[i].detach().contiguous().reshape(-1).view(torch.uint8))


async def open_ipc(engine: Any) -> None:
    """The IPC handshake (once per engine): vLLM's IPC engine decodes packed buckets, as :func:`sync_ipc` sends."""
    from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

    await engine.init_weight_transfer_engine(WeightTransferInitRequest(init_info=dict(IPC_INIT)))


async def sync_ipc(engine: Any, state: Mapping[str, Any], bucket_bytes: int, device: Any) -> int:
    """Send ``state`` to ``engine`` (an ``AsyncLLM`` with the ipc backend) through CUDA IPC; returns bytes sent."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor
    from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

    tensors, plan = ipc_plan(state, bucket_bytes)
    buf = torch.empty(max(b.nbytes for b in plan), dtype=torch.uint8, device=device)
    _, args = reduce_tensor(buf)  # one export per sync: the worker releases it in finish_weight_update
    handle = {str(torch.cuda.get_device_properties(device).uuid): args}
    sent = 0
    await engine.pause_generation(mode="keep", clear_cache=False)
    try:
        await engine.start_weight_update()
        try:
            for bucket in plan:
                pack_bucket(buf, bucket, tensors)
                torch.cuda.current_stream(device).synchronize()
                # returns once the worker has copied the bucket out: the buffer is free again
                await engine.update_weights(WeightTransferUpdateRequest(update_info=ipc_update_info(bucket, handle)))
                sent += bucket.nbytes
        finally:
            await engine.finish_weight_update()
    finally:
        await engine.resume_generation()
        del buf
        torch.cuda.ipc_collect()
    return sent


class _LoopClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol over an ``AsyncLLM`` running on another thread's loop."""

    def __init__(self, engine: Any, run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
        self.engine, self.run = engine, run

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        self.run(self.engine.init_weight_transfer_engine(WeightTransferInitRequest(init_info=init_info)))

    def start_weight_update(self) -> None:
        self.run(self.engine.start_weight_update())

    def update_weights(self, update_info: Any) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        self.run(self.engine.update_weights(WeightTransferUpdateRequest(update_info=update_info)))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.run(self.engine.finish_weight_update(weight_version))


def state_source(device: Any) -> Any:
    """A vLLM ``WeightSource`` over a swappable state dict (tensors moved to ``device`` as they are sent)."""
    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class StateSource(WeightSource):
        def __init__(self) -> None:
            self.items: list[tuple[str, Any]] = []

        def metadata(self) -> list[ParamMeta]:
            return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.items]

        def __iter__(self) -> Iterator[tuple[str, Any]]:
            for name, t in self.items:
                yield name, t.detach().to(device, non_blocking=True)

    return StateSource()


def nccl_init_info(host: str, port: int, tensor_parallel: int, bucket_bytes: int) -> Any:
    """The trainer's ``NCCLTrainerInitInfo``: rank 0 of 1 + ``tensor_parallel`` ranks, packed buckets."""
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

    return NCCLTrainerInitInfo(master_address=host, master_port=port, world_size=1 + tensor_parallel, rank=0,
                               packed=True, packed_buffer_size_bytes=bucket_bytes)


class NcclLink:
    """The trainer's end of vLLM's NCCL weight transfer to one in-process engine (opened on first use).

    Its methods block (NCCL and the engine's RPCs rendezvous): call them off the engine's loop.
    """

    def __init__(self, engine: Any, run: Callable[[Coroutine[Any, Any, Any]], Any], tensor_parallel: int,
                 bucket_bytes: int, device: Any) -> None:
        self.engine, self.run, self.device = engine, run, device
        self.tensor_parallel, self.bucket_bytes = tensor_parallel, bucket_bytes
        self.sender: Any = None
        self.source: Any = None

    def open(self) -> None:
        import torch
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        from memrl.io.ports import free_port

        self.source = state_source(self.device)
        with torch.cuda.device(self.device):
            self.sender = WeightTransferTrainerFactory.trainer_init(
                nccl_init_info("127.0.0.1", free_port(), self.tensor_parallel, self.bucket_bytes),
                client=_LoopClient(self.engine, self.run), source=self.source)

    def send(self, state: Mapping[str, Any]) -> int:
        """Broadcast ``state`` to the workers (generation paused meanwhile); returns bytes sent."""
        import torch

        if self.sender is None:
            self.open()
        self.source.items = list(state.items())
        self.run(self.engine.pause_generation(mode="keep", clear_cache=False))
        try:
            with torch.cuda.device(self.device):
                self.sender.send_weights()
        finally:
            self.run(self.engine.resume_generation())
        return sum(t.numel() * t.element_size() for _, t in self.source.items)

    def close(self) -> None:
        if self.sender is not None:
            self.sender.shutdown()
            self.sender = None


def run_on(loop: asyncio.AbstractEventLoop) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """A blocking runner of coroutines on ``loop`` (another thread's)."""
    return lambda coro: asyncio.run_coroutine_threadsafe(coro, loop).result()
