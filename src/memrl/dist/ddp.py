"""Data-parallel training over torch.distributed (gloo on CPU, NCCL on GPU).

Rank 0 runs the rollout (locally or through the Ray pool), computes advantages
and broadcasts the rows; every rank then takes a token-balanced share of each
mini-batch. Each rank's loss is normalised by the *global* token (or row) count,
so summing the ranks' gradients gives exactly the single-process gradient of the
whole mini-batch; that sum is what ``all_reduce`` computes (DDP's average times
the world size), and clipping and the optimizer step then run identically on
every rank, keeping the replicas of the weights equal.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from memrl.io.ports import free_port  # noqa: F401  (re-exported: the launchers and tests import it from here)


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    @classmethod
    def from_env(cls, backend: str = "auto", group_of_one: bool = False,
                 timeout_s: float | None = None) -> DistContext:
        """Join the process group described by RANK/WORLD_SIZE (torchrun or ``memrl train``'s launcher).

        ``group_of_one``: under torchrun with one process, still create the group
        (FSDP needs one; a one-GPU run of the sharded path checks it end to end). ``timeout_s``: how long a
        collective waits (``cluster.collective_timeout_s``); the other ranks wait for rank 0's rollouts in
        one, which NCCL's default 10 minutes would cut short.
        """
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1 and not (group_of_one and "WORLD_SIZE" in os.environ):
            return cls()
        if not dist.is_initialized():
            if backend == "auto":
                backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":  # one GPU per rank; NCCL and FSDP's device mesh use the current device
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
            dist.init_process_group(backend=backend, timeout=timeout)
        return cls(dist.get_rank(), dist.get_world_size())

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled)."""
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum(self, values: Sequence[float]) -> list[float]:
        return self._reduce(values, dist.ReduceOp.SUM)

    def max(self, values: Sequence[float]) -> list[float]:
        return self._reduce(values, dist.ReduceOp.MAX)

    def _reduce(self, values: Sequence[float], op: Any) -> list[float]:
        if not self.active:
            return list(values)
        nccl = dist.get_backend() == "nccl"  # NCCL reduces device tensors only
        t = torch.tensor(list(values), dtype=torch.float64, device="cuda" if nccl else "cpu")
        dist.all_reduce(t, op=op)
        return t.tolist()

    def sum_grads(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum gradients over ranks in one flat buffer (ranks with no rows contribute zeros)."""
        if not self.active:
            return
        params = list(params)
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        offset = 0
        for p in params:
            n = p.grad.numel()
            p.grad.copy_(flat[offset: offset + n].view_as(p.grad))
            offset += n

    def sync_params(self, module: torch.nn.Module) -> None:
        """Start every rank from rank 0's weights."""
        if not self.active:
            return
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.data, src=0)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def exit_rank_cleanly() -> None:
    """End a spawned rank whose run finished, skipping the interpreter's teardown.

    After ``destroy_process_group`` a gloo rank can still abort while the interpreter shuts down
    ("terminate called without an active exception", SIGABRT; about one run in ten of the FSDP test
    here): tensors held by the backend's worker threads are freed after Python is gone (PyTorch PR
    179291 describes it). The exit handlers still run first (Ray's and vLLM's shutdowns, logging), while
    the interpreter is whole; then the rank leaves without the teardown that can crash.
    """
    import atexit
    import os
    import sys

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def shard_by_tokens(lengths: Sequence[int], world: int) -> list[list[int]]:
    """Split row indices into ``world`` shards of similar token totals (longest first, to the lightest).

    Deterministic, so every rank computes the same split without talking.
    """
    shards: list[list[int]] = [[] for _ in range(world)]
    load = [0] * world
    for i in sorted(range(len(lengths)), key=lambda k: (-lengths[k], k)):
        r = min(range(world), key=lambda k: (load[k], k))
        shards[r].append(i)
        load[r] += lengths[i]
    return [sorted(s) for s in shards]
