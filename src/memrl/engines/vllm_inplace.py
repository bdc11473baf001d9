"""The trainer's side of an in-place weight sync: new weights written straight into the served parameters.

Where vLLM's CPU build runs in plain layout (``engine.vllm.cpu_layout=plain``,
:mod:`memrl.engines.vllm_plain`), every loaded tensor is served as it is, so the worker can
hold its parameters in one shared-memory file. The first sync asks the worker to move them
there and to say where each checkpoint tensor lives in that file (learnt from vLLM's own
weight loaders); from then on a sync is: pause the engine between steps, copy each tensor
once into the mapped file, resume. No RPC carries weights, nothing is staged, no extra
memory is taken (the file *is* the engine's weights). A state of another layout (names or
shapes), or a model the worker cannot map, uses the shared-memory buckets instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.engines.vllm_sync import copy_into, pause


@dataclass
class SharedWeights:
    """The engine's parameters, mapped: where each checkpoint tensor is served."""

    buf: Any  # uint8 tensor mapping the worker's parameter file
    entries: dict[str, tuple[int, str, list[int]]]  # name -> (byte offset, served dtype, shape)
    layout: list[tuple[str, list[int]]]  # the (name, shape) list this was planned for

    def fits(self, state: Mapping[str, Any]) -> bool:
        return [(n, list(t.shape)) for n, t in state.items()] == self.layout


def layout_of(state: Mapping[str, Any]) -> tuple[list[str], list[list[int]], list[str]]:
    """(names, shapes, torch dtype names) of ``state``, as the worker's planning RPC takes them."""
    return ([n for n in state], [list(t.shape) for t in state.values()],
            [str(t.dtype).removeprefix("torch.") for t in state.values()])


def map_shared(answer: tuple[str, int, list[Any]], state: Mapping[str, Any]) -> SharedWeights:
    """Map the file a worker's ``memrl_share_weights`` made, and remove its name (both sides map it now)."""
    import torch

    path, size, entries = answer
    try:
        buf = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
    finally:
        Path(path).unlink(missing_ok=True)
    return SharedWeights(buf, {n: (int(o), d, list(s)) for n, o, d, s in entries},
                         [(n, list(t.shape)) for n, t in state.items()])


SPLIT = 2**20  # arrays from this size are cut across the copying threads


def balance(jobs: list[tuple[Any, Any]], lanes: int) -> list[list[tuple[Any, Any]]]:
    """``jobs`` (destination, source) byte arrays dealt into ``lanes`` lists of about equal bytes, the largest
    first; an array from :data:`SPLIT` bytes is cut into ``lanes`` pieces so one big tensor cannot hold a lane."""
    pieces: list[tuple[Any, Any]] = []
    for dst, src in jobs:
        step = -(-src.nbytes // lanes) if src.nbytes >= SPLIT and lanes > 1 else max(src.nbytes, 1)
        pieces += [(dst[i: i + step], src[i: i + step]) for i in range(0, src.nbytes, step)]
    out: list[list[tuple[Any, Any]]] = [[] for _ in range(lanes)]
    load = [0] * lanes
    for dst, src in sorted(pieces, key=lambda p: -p[1].nbytes):
        k = load.index(min(load))
        out[k].append((dst, src))
        load[k] += src.nbytes
    return out


def _copy_all(pairs: list[tuple[Any, Any]]) -> None:
    import numpy as np

    for dst, src in pairs:
        np.copyto(dst, src)


def write_shared(shared: SharedWeights, state: Mapping[str, Any], pool: ThreadPoolExecutor | None = None,
                 lanes: int = 1) -> int:
    """Copy every served tensor of ``state`` into the engine's parameters; returns the bytes written.

    Host tensors already in the served dtype are copied as bytes by numpy in ``lanes`` threads of ``pool`` (numpy's
    copy releases the GIL): a few hundred plain ``memcpy`` calls split evenly over the cores, where torch
    would open a parallel region per tensor. Anything else (another device or dtype) is copied by torch.
    """
    import torch

    jobs = []
    sent = 0
    for name, (off, dtype, shape) in shared.entries.items():
        t = state[name].detach()
        if t.device.type == "cpu" and str(t.dtype) == f"torch.{dtype}" and t.is_contiguous():
            src = t.reshape(-1).view(torch.uint8).numpy()
            jobs.append((shared.buf[off: off + src.nbytes].numpy(), src))
            sent += src.nbytes
        else:
            sent += copy_into(shared.buf, off, t, dtype, shape)
    if pool is None or lanes == 1:
        _copy_all(jobs)
    else:
        list(pool.map(_copy_all, balance(jobs, lanes)))
    return sent


class InPlaceSync:
    """One engine's in-place path: planned on the first sync that can use it, refused for good if it cannot."""

    def __init__(self, root: str, threads: int | None = None) -> None:
        import torch

        self.root = root
        self.shared: SharedWeights | None = None
        self.refused = False
        self.lanes = threads or max(1, torch.get_num_threads())  # as many copying threads as torch would use
        self.pool = ThreadPoolExecutor(self.lanes, thread_name_prefix="memrl-sync")

    async def applies(self, engine: Any, state: Mapping[str, Any]) -> bool:
        """Whether ``state`` can be written in place into ``engine`` (an ``AsyncLLM`` with one plain-layout
        worker); the first call has the worker move its parameters into shared memory."""
        if self.shared is None and not self.refused:
            answer = (await engine.collective_rpc("memrl_share_weights", args=(*layout_of(state), self.root)))[0]
            self.refused = answer is None
            self.shared = None if answer is None else map_shared(answer, state)
        return self.shared is not None and self.shared.fits(state)

    async def sync(self, engine: Any, state: Mapping[str, Any]) -> int:
        """Pause ``engine`` between steps, write ``state`` into its parameters, resume; returns the bytes sent."""
        assert self.shared is not None, "applies() first"
        await pause(engine)
        try:
            return await asyncio.to_thread(write_shared, self.shared, state, self.pool, self.lanes)
        finally:
            await engine.resume_generation()

    def close(self) -> None:
        self.shared = None
        self.pool.shutdown(wait=False)
