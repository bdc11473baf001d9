"""Weight sync as a collective: the trainer broadcasts, every rollout replica receives in place.

``cluster.weight_sync=collective`` opens one process group of its own (its own
TCP store, apart from the trainers' data-parallel group): the trainer is rank
0, replica i is rank i+1. Gloo carries CPU tensors; NCCL carries GPU tensors
from the trainer's GPU straight to each replica's GPU, with no stop in host
memory or the Ray object store. NCCL puts at most one rank on a GPU, so it
needs ``placement=split`` with whole GPUs; replicas that share the trainer's
GPU use the object store.

Tensors travel in buckets (same dtype, up to ``bucket_mb`` each), one
broadcast per bucket, so a model of thousands of small tensors costs a few
collectives, not thousands. Both sides derive the buckets from the same
layout (names, shapes, dtypes), which the trainer sends through Ray first.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

Layout = list[tuple[str, tuple[int, ...], str]]


def layout_of(state: Mapping[str, torch.Tensor]) -> Layout:
    return [(k, tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in state.items()]


def buckets(layout: Layout, bucket_bytes: int) -> list[list[int]]:
    """Indices of ``layout`` grouped into consecutive same-dtype runs of at most ``bucket_bytes``.

    A tensor larger than the limit gets a bucket of its own.
    """
    out: list[list[int]] = []
    size = 0
    for i, (_, shape, dtype) in enumerate(layout):
        nbytes = _numel(shape) * torch.empty((), dtype=getattr(torch, dtype)).element_size()
        if out and layout[out[-1][0]][2] == dtype and size + nbytes <= bucket_bytes:
            out[-1].append(i)
            size += nbytes
        else:
            out.append([i])
            size = nbytes
    return out


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


class SyncGroup:
    """One member of the trainer-to-replicas broadcast group (rank 0 sends, the others receive)."""

    def __init__(self, host: str, port: int, rank: int, world: int, backend: str, device: str = "cpu",
                 timeout_s: float = 300.0) -> None:
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(host, port, world, is_master=rank == 0, timeout=timeout)
        prefixed = dist.PrefixStore("memrl-weight-sync", store)
        if backend == "nccl":
            self.pg: Any = dist.ProcessGroupNCCL(prefixed, rank, world)
        elif backend == "gloo":
            self.pg = dist.ProcessGroupGloo(prefixed, rank, world, timeout)
        else:
            raise ValueError(f"weight sync backend must be gloo or nccl, not {backend!r}")
        self._store = store  # the rank-0 store serves the others: keep it alive with the group
        self.rank, self.world, self.backend, self.device = rank, world, backend, torch.device(device)

    def _broadcast(self, flat: torch.Tensor) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.pg.broadcast([flat], opts).wait()

    def send(self, state: Mapping[str, torch.Tensor], bucket_mb: float = 256) -> None:
        """Rank 0: broadcast ``state`` (in the order of ``layout_of(state)``)."""
        tensors = list(state.values())
        for idx in buckets(layout_of(state), int(bucket_mb * 2**20)):
            flat = torch.cat([tensors[i].detach().reshape(-1).to(self.device) for i in idx])
            self._broadcast(flat)

    def receive(self, layout: Layout, bucket_mb: float = 256) -> dict[str, torch.Tensor]:
        """Ranks > 0: the tensors rank 0 sends, on this member's device."""
        out: dict[str, torch.Tensor] = {}
        for idx in buckets(layout, int(bucket_mb * 2**20)):
            dtype = getattr(torch, layout[idx[0]][2])
            flat = torch.empty(sum(_numel(layout[i][1]) for i in idx), dtype=dtype, device=self.device)
            self._broadcast(flat)
            offset = 0
            for i in idx:
                name, shape, _ = layout[i]
                n = _numel(shape)
                out[name] = flat[offset: offset + n].view(shape)
                offset += n
        return out

    def close(self) -> None:
        shutdown = getattr(self.pg, "shutdown", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # a group whose peer died may not shut down cleanly; it is dropped either way
                pass
