"""A resumable, seeded order over the training samples.

Epoch ``e`` visits the samples in ``permutation(seed, e)``; the position is one
integer (samples consumed so far), so a checkpoint restores the exact order
and a resumed run neither repeats nor skips a sample.
"""

from __future__ import annotations

import random


class ResumableSampler:
    """``shuffle=False`` visits the file in order every epoch (verl's ``data.shuffle=False``, which MemAgent's and
    ReMemR1's launch scripts set)."""

    def __init__(self, size: int, seed: int, position: int = 0, shuffle: bool = True) -> None:
        if size <= 0:
            raise ValueError("the training set is empty")
        self.size = size
        self.seed = seed
        self.position = position
        self.shuffle = shuffle

    def _order(self, epoch: int) -> list[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(f"memrl-data:{self.seed}:{epoch}").shuffle(order)
        return order

    def take(self, k: int) -> list[int]:
        """The next ``k`` sample indices (crossing epochs as needed)."""
        out = []
        while len(out) < k:
            epoch, offset = divmod(self.position, self.size)
            order = self._order(epoch)
            n = min(k - len(out), self.size - offset)
            out.extend(order[offset: offset + n])
            self.position += n
        return out
