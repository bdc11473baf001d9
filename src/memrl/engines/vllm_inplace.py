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


def write_shared(shared: SharedWeights, state: Mapping[str, Any]) -> int:
    """Copy every served tensor of ``state`` into the engine's parameters; returns the bytes written."""
    return sum(copy_into(shared.buf, off, state[name], dtype, shape)
               for name, (off, dtype, shape) in shared.entries.items())


class InPlaceSync:
    """One engine's in-place path: planned on the first sync that can use it, refused for good if it cannot."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.shared: SharedWeights | None = None
        self.refused = False

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
            return await asyncio.to_thread(write_shared, self.shared, state)
        finally:
            await engine.resume_generation()

    def close(self) -> None:
        self.shared = None
