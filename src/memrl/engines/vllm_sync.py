"""How new weights reach the in-process vLLM engine's workers: the path, its buckets, and the shared-memory path.

Paths (``engine.vllm.sync_path``), fastest first where they apply:

* ``ipc`` (CUDA, the engine's single GPU is the trainer's): the trainer packs a bucket
  into one GPU buffer and sends its CUDA IPC handle; vLLM's IPC weight-transfer engine
  opens it in the worker (:mod:`memrl.engines.vllm_gpu_sync`).
* ``nccl`` (CUDA, the engine on GPUs the trainer does not use): a broadcast from the
  trainer (rank 0) to the engine's workers through a stateless process group, vLLM's
  NCCL weight-transfer engine on the receiving side.
* ``shm`` (any platform, the workers on this machine): the trainer copies each bucket
  once into a file in ``/dev/shm``; the workers map the file and load views of it.
  Two files are reused round-robin (writing one while the workers read the other), so
  the extra memory is two buckets; their pages stay mapped on both sides between syncs,
  and their names are removed once mapped, so a killed process leaves nothing behind.
  Where vLLM's CPU build serves plain weights (``engine.vllm.cpu_layout=plain``) the
  trainer writes them in place instead, no buckets at all (:mod:`memrl.engines.vllm_inplace`).
* ``bytes`` (anywhere): safetensors bytes through vLLM's RPC channel, the fallback.

Buckets hold whole layers (runs of names with the same leading ``...layers.N`` index),
so a layer's weights all arrive in one load and vLLM's layerwise reload finishes the
layer before the next bucket reuses the memory. A tensor that aliases an earlier one
(tied ``lm_head``/``embed_tokens``) is still loaded under its own name (vLLM's CPU
build packs ``lm_head`` separately), but in shared memory it is planned next to the
original and points at the same bytes, so it costs nothing to send.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SYNC_PATHS = ("bytes", "shm", "ipc", "nccl")
ALIGN = 64  # byte alignment of each tensor in a shared-memory bucket (any dtype may view it)


@dataclass
class Bucket:
    """Tensors sent together: their names, dtypes (torch names), shapes and byte offsets in one buffer."""

    names: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)  # positions in the planned tensor list

    @property
    def nbytes(self) -> int:
        """The buffer this bucket needs (its last byte + 1)."""
        return max((o + s for o, s in zip(self.offsets, self.sizes, strict=True)), default=0)

    @property
    def payload(self) -> int:
        """Bytes that travel (an alias shares its original's)."""
        return sum(dict(zip(self.offsets, self.sizes, strict=True)).values())


def layer_key(name: str) -> str:
    """The name up to its first integer segment (``model.layers.3``), or '' for names outside any layer."""
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return ""


def with_aliases(state: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], dict[int, int]]:
    """``state``'s items with each alias (same memory, shape, strides and dtype as an earlier tensor) moved
    right after its original, and {alias position: original position}."""
    first: dict[tuple[Any, ...], int] = {}
    order: list[tuple[str, Any]] = []
    later: dict[int, list[tuple[str, Any]]] = {}
    for name, t in state.items():
        key = (t.device, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key in first:
            later.setdefault(first[key], []).append((name, t))
        else:
            first[key] = len(order)
            order.append((name, t))
    items: list[tuple[str, Any]] = []
    aliases: dict[int, int] = {}
    for i, item in enumerate(order):
        origin = len(items)
        items.append(item)
        for alias in later.get(i, []):
            aliases[len(items)] = origin
            items.append(alias)
    return items, aliases


def _nbytes(shape: Sequence[int], itemsize: int) -> int:
    n = itemsize
    for s in shape:
        n *= s
    return n


def plan_buckets(layout: Sequence[tuple[str, Sequence[int], Any]], bucket_bytes: int, align: int = ALIGN,
                 aliases: Mapping[int, int] | None = None) -> list[Bucket]:
    """Group ``(name, shape, torch dtype)`` into buckets of whole layers, each at most ``bucket_bytes``.

    Consecutive names with the same :func:`layer_key` form a layer; a layer never straddles
    two buckets (one larger than the limit gets a bucket of its own). Offsets are multiples of
    ``align``; 1 packs them back to back, as vLLM's IPC consumer expects, widest dtypes first. ``aliases`` ({position:
    original position}, the alias right after its original): the alias joins the original's
    layer and shares its offset.
    """
    aliases = aliases or {}
    groups: list[list[int]] = []
    for i, (name, _, _) in enumerate(layout):
        if groups and (i in aliases or layer_key(layout[groups[-1][0]][0]) == layer_key(name)):
            groups[-1].append(i)
        else:
            groups.append([i])
    buckets: list[Bucket] = []
    current, end = Bucket(), 0
    for group in groups:
        sizes = [_nbytes(layout[i][1], layout[i][2].itemsize) for i in group]
        need = sum(-(-s // align) * align for i, s in zip(group, sizes, strict=True) if i not in aliases)
        if current.names and end + need > bucket_bytes:
            buckets.append(current)
            current, end = Bucket(), 0
        for i, size in zip(group, sizes, strict=True):
            name, shape, dtype = layout[i]
            current.names.append(name)
            current.dtypes.append(str(dtype).removeprefix("torch."))
            current.shapes.append([int(s) for s in shape])
            current.sizes.append(size)
            if i in aliases:
                current.indices.append(aliases[i])
                current.offsets.append(current.offsets[current.indices.index(aliases[i])])
                continue
            current.indices.append(i)
            current.offsets.append(end)
            end += -(-size // align) * align
    if current.names:
        buckets.append(current)
    if align == 1 and not aliases:
        return [_by_itemsize(b, layout) for b in buckets]
    return buckets


def _by_itemsize(bucket: Bucket, layout: Sequence[tuple[str, Sequence[int], Any]]) -> Bucket:
    """The bucket packed back to back with its widest dtypes first: every offset is then a multiple of its
    tensor's element size (sizes are multiples of theirs), so the consumer can view each slice as its dtype."""
    order = sorted(range(len(bucket.names)), key=lambda k: -layout[bucket.indices[k]][2].itemsize)
    out, end = Bucket(), 0
    for k in order:
        out.names.append(bucket.names[k])
        out.dtypes.append(bucket.dtypes[k])
        out.shapes.append(bucket.shapes[k])
        out.sizes.append(bucket.sizes[k])
        out.indices.append(bucket.indices[k])
        out.offsets.append(end)
        end += bucket.sizes[k]
    return out


def choose_path(requested: str, *, cuda: bool, tensor_parallel: int, trainer_gpu: int | None,
                shm_dir: str | None) -> tuple[str, str]:
    """(path, why) for an in-process engine whose workers use GPUs ``0..tensor_parallel-1``.

    ``trainer_gpu``: the trainer's CUDA device index (None: not on a GPU). ``shm_dir``: a
    shared-memory folder both sides can use, or None. A requested path that cannot work
    here is refused with the reason, never silently replaced.
    """
    engine_gpus = set(range(tensor_parallel))
    on_engine_gpu = trainer_gpu is not None and trainer_gpu in engine_gpus
    options: dict[str, str | None] = {
        "ipc": (None if cuda and tensor_parallel == 1 and trainer_gpu == 0 else
                "needs CUDA, a single-GPU engine (tensor_parallel_size=1) and the trainer on that GPU"),
        "nccl": (None if cuda and trainer_gpu is not None and not on_engine_gpu else
                 "needs CUDA and the trainer on a GPU the engine does not use (NCCL puts one rank per GPU)"),
        "shm": None if shm_dir else "needs a shared-memory folder (/dev/shm) writable by this process",
        "bytes": None,
    }
    if requested != "auto":
        if requested not in options:
            raise ValueError(f"engine.vllm.sync_path must be auto or one of {', '.join(SYNC_PATHS)}, "
                             f"not {requested!r}")
        problem = options[requested]
        if problem:
            raise ValueError(f"engine.vllm.sync_path={requested} {problem}")
        return requested, "requested"
    for path in ("ipc", "nccl", "shm", "bytes"):
        if options[path] is None:
            return path, "auto"
    raise AssertionError("bytes always applies")


def shm_root() -> str | None:
    """``/dev/shm`` (or ``$MEMRL_SHM_DIR``) when it is a writable folder, else None."""
    root = os.environ.get("MEMRL_SHM_DIR", "/dev/shm")
    return root if os.path.isdir(root) and os.access(root, os.W_OK) else None


class ShmSlots:
    """Reusable shared-memory files for buckets, each unlinked as soon as the workers have mapped it.

    A mapped file's memory lives while some process maps it, so its name is only needed until the
    workers have opened it: nothing stays behind in ``/dev/shm`` when a process dies.
    """

    def __init__(self, root: str, count: int = 2) -> None:
        self.root, self.count = root, count
        self._maps: dict[int, tuple[Path, Any]] = {}
        self._linked: set[Path] = set()

    def get(self, index: int, nbytes: int) -> tuple[Path, Any, Path | None]:
        """(path, uint8 tensor mapping it, the slot's older file the workers must drop, if any) of slot
        ``index % count``, at least ``nbytes`` long."""
        import torch

        slot = index % self.count
        have = self._maps.get(slot)
        if have is not None and have[1].numel() >= nbytes:
            return have[0], have[1], None
        if have is not None:
            self.settle(have[0])
        fd, name = tempfile.mkstemp(prefix=f"memrl-sync-slot{slot}-", dir=self.root)
        try:
            os.ftruncate(fd, nbytes)
        finally:
            os.close(fd)
        path = Path(name)
        self._linked.add(path)
        buf = torch.from_file(name, shared=True, size=nbytes, dtype=torch.uint8)
        self._maps[slot] = (path, buf)
        return path, buf, None if have is None else have[0]

    def settle(self, path: Path) -> None:
        """The workers have mapped ``path`` (or no longer need it): remove its name."""
        if path in self._linked:
            path.unlink(missing_ok=True)
            self._linked.discard(path)

    def close(self) -> None:
        for path in list(self._linked):
            self.settle(path)
        self._maps.clear()


PARALLEL_COPY = 2**16  # host tensors from this size are copied by torch (all cores), smaller ones by numpy


def copy_into(buf: Any, off: int, t: Any, dtype: str, shape: Sequence[int]) -> int:
    """Copy ``t`` (any device and dtype) into ``buf`` (uint8, host memory) at byte ``off`` as ``dtype``; its bytes.

    A host tensor of the same dtype is copied as bytes: a small one by numpy (one plain ``memcpy``), where torch
    would open a parallel region per tensor (thousands of thread hand-offs per sync on a busy CPU), a large one
    by torch, whose byte copy uses every core (its per-dtype copy loop is slower).
    """
    import numpy as np
    import torch

    t = t.detach()
    dt = getattr(torch, dtype)
    size = t.numel() * dt.itemsize
    dst = buf[off: off + size]
    with torch.no_grad():
        if t.device.type != "cpu" or t.dtype != dt or not t.is_contiguous():
            dst.view(dt).view(list(shape)).copy_(t)  # moved and/or converted
        elif size < PARALLEL_COPY:
            np.copyto(dst.numpy(), t.reshape(-1).view(torch.uint8).numpy())
        else:  # as bytes: torch's plain byte copy, not its per-dtype loop
            dst.copy_(t.reshape(-1).view(torch.uint8))
    return size


def write_bucket(buf: Any, bucket: Bucket, tensors: Sequence[Any]) -> None:
    """Copy the bucket's tensors (any device) into ``buf`` (uint8, in host memory) at their offsets, each once."""
    done: set[int] = set()
    for i, off, shape, dtype in zip(bucket.indices, bucket.offsets, bucket.shapes, bucket.dtypes, strict=True):
        if off not in done:
            done.add(off)
            copy_into(buf, off, tensors[i], dtype, shape)


async def pause(engine: Any) -> None:
    """Stop ``engine`` (an ``AsyncLLM``) between steps, its requests kept: vLLM's ``pause_generation`` minus the
    20 ms sleep it adds only to order its outputs for the caller, which a sync has no use for."""
    core = getattr(getattr(engine, "engine_core", None), "pause_scheduler_async", None)
    if core is None:
        await engine.pause_generation(mode="keep", clear_cache=False)
    else:
        await core(mode="keep", clear_cache=False)


async def sync_shm(engine: Any, state: Mapping[str, Any], slots: ShmSlots, bucket_bytes: int) -> int:
    """Send ``state`` to the workers of ``engine`` (an ``AsyncLLM``) through ``slots``; returns bytes sent.

    Writing bucket i overlaps the workers' loading of bucket i-1; bucket i reuses the file of
    bucket i-2, which the workers finished before bucket i-1 was sent.
    """
    items, aliases = with_aliases(state)
    tensors = [t for _, t in items]
    plan = plan_buckets([(n, t.shape, t.dtype) for n, t in items], bucket_bytes, aliases=aliases)
    sent = 0

    async def load(path: Path, buf: Any, bucket: Bucket) -> None:
        await engine.collective_rpc("memrl_load_bucket", args=(str(path), buf.numel(), bucket.names, bucket.dtypes,
                                                               bucket.shapes, bucket.offsets))
        slots.settle(path)  # mapped by every worker now

    await pause(engine)  # no step may see a half-loaded model
    try:
        await engine.collective_rpc("memrl_begin_update")
        loading: asyncio.Future[Any] | None = None
        try:
            for i, bucket in enumerate(plan):
                path, buf, old = slots.get(i, bucket.nbytes)
                if old is not None:  # the workers map the slot's old file: let them finish with it, then drop it
                    if loading is not None:
                        await loading
                        loading = None
                    await engine.collective_rpc("memrl_release_shm", args=(str(old),))
                await asyncio.to_thread(write_bucket, buf, bucket, tensors)
                if loading is not None:
                    await loading
                loading = asyncio.ensure_future(load(path, buf, bucket))
                sent += bucket.payload
            if loading is not None:
                await loading
                loading = None
        finally:
            if loading is not None:
                await asyncio.gather(loading, return_exceptions=True)
            await engine.collective_rpc("memrl_finish_update")
    finally:
        await engine.resume_generation()
    return sent


def weight_buckets(state_dict: Mapping[str, Any], bucket_bytes: int) -> list[dict[str, Any]]:
    """Split a state dict into CPU buckets of one dtype each, at most ``bucket_bytes`` (one tensor may exceed it).

    Tensors that share storage (tied ``embed_tokens``/``lm_head``) are cloned: safetensors
    refuses to serialize aliases.
    """
    seen: set[int] = set()
    by_dtype: dict[Any, list[tuple[str, Any]]] = {}
    for name, t in state_dict.items():
        t = t.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        by_dtype.setdefault(t.dtype, []).append((name, t))
    buckets: list[dict[str, Any]] = []
    for items in by_dtype.values():
        current: dict[str, Any] = {}
        size = 0
        for name, t in items:
            nbytes = t.numel() * t.element_size()
            if current and size + nbytes > bucket_bytes:
                buckets.append(current)
                current, size = {}, 0
            current[name] = t
            size += nbytes
        if current:
            buckets.append(current)
    return buckets
