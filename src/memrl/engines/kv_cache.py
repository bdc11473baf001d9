"""KV-cache storage of the HF engine: room reserved up front, freed memory given back to the OS.

Split from :mod:`memrl.engines.hf` so the engine module holds scheduling and the decode loop.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from typing import Any

import torch


def kv_layer_class() -> type:
    """A KV-cache layer that writes new keys/values into room reserved up front instead of concatenating.

    transformers' ``DynamicLayer`` concatenates every decode step, copying the
    whole cache of every layer once per generated token. This layer reserves
    ``capacity`` positions (prompt width + the engine's reserve of new tokens) at the
    first update and hands attention a view of the filled part. Past the
    reserve it doubles. Dropping finished rows copies the kept rows once, as before.
    """
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = capacity
            self.filled = 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True
                self._k = key_states.new_empty(*key_states.shape[:2], self.capacity, key_states.shape[3])
                self._v = value_states.new_empty(*value_states.shape[:2], self.capacity, value_states.shape[3])
            end = self.filled + key_states.shape[-2]
            if end > self._k.shape[-2]:  # past the reserve: double it
                grow = max(end, 2 * self._k.shape[-2]) - self._k.shape[-2]
                self._k = torch.cat([self._k, self._k.new_empty(*self._k.shape[:2], grow, self._k.shape[3])], -2)
                self._v = torch.cat([self._v, self._v.new_empty(*self._v.shape[:2], grow, self._v.shape[3])], -2)
            self._k[:, :, self.filled:end] = key_states
            self._v[:, :, self.filled:end] = value_states
            self.filled = end
            self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.is_initialized:
                self._k, self._v = self._k[indices], self._v[indices]
                self.keys, self.values = self._k[:, :, :self.filled], self._v[:, :, :self.filled]

    return ReservedLayer


def append_rows(cache: Any, joined: Any, skip: int = 0) -> int:
    """Append the rows of ``joined`` (a prefilled :func:`reserved_cache`) to ``cache``, in place; the new width.

    Both are left-padded: the narrower one gets zero keys/values on the left (masked out by the caller's
    attention mask, as a prompt's padding is), so every row's filled part ends at the same column. The
    first ``skip`` columns of ``cache`` (masked in every row: padding of rows that have left) are dropped,
    so a batch that keeps admitting rows does not drag its whole history along. Each layer keeps room
    for the larger of the two caches' remaining reserves. The new tensors are built for every layer
    before any is replaced, so a failure (out of memory) leaves ``cache`` as it was.
    """
    built = []
    for mine, theirs in zip(cache.layers, joined.layers):
        n, k = mine.keys.shape[0], theirs.keys.shape[0]
        kept = mine.filled - skip
        width = max(kept, theirs.filled)
        room = max(mine._k.shape[-2] - mine.filled, theirs._k.shape[-2] - theirs.filled)
        heads, dim = mine._k.shape[1], mine._k.shape[3]
        pair = []
        for name in ("_k", "_v"):
            out = getattr(mine, name).new_zeros(n + k, heads, width + room, dim)
            out[:n, :, width - kept:width] = getattr(mine, name)[:, :, skip:mine.filled]
            out[n:, :, width - theirs.filled:width] = getattr(theirs, name)[:, :, :theirs.filled]
            pair.append(out)
        built.append((mine, width, pair))
    for mine, width, (keys, values) in built:
        mine._k, mine._v, mine.filled = keys, values, width
        mine.keys, mine.values = keys[:, :, :width], values[:, :, :width]
    return built[0][1] if built else 0


def reserved_cache(capacity: int) -> Any:
    """A ``DynamicCache`` whose layers reserve ``capacity`` positions (see :func:`_kv_layer_class`)."""
    from transformers import DynamicCache

    layer = kv_layer_class()
    cache = DynamicCache()
    cache.layer_class_to_replicate = lambda: layer(capacity)
    return cache


def release_freed_memory() -> None:
    """Give the heap memory a finished batch freed back to the OS (glibc only; elsewhere nothing).

    The decode runs in a worker thread, so glibc serves its tensors from another
    arena than the trainer's thread. Memory freed in one arena stays mapped and
    is not reused by the other, so the update's activations came on top of the
    decode's freed cache and the decode's on top of the update's: peak RSS was
    the sum of both phases instead of the larger one. ``malloc_trim`` (every
    arena) runs before and after each batch and returns the free pages.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
