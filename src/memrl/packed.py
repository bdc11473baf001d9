"""Compact, list-like sequences for the per-token fields of a conversation.

A MemAgent episode over a 3.5M-token context keeps every memory turn's prompt ids, so its
conversations hold millions of tokens. As Python lists each token cost ~40 bytes (an 8-byte
pointer per list plus an int or float object); here a token id costs 4 bytes, a loss-mask
entry 1 byte and a log-prob 8 bytes only where one was sampled: prompt, tool and user tokens
carry log-prob 0.0, which is stored as a gap, not as numbers.

The classes read like lists where memrl and its tests use them: ``len``, iteration, indexing,
slicing (a slice is a plain ``list``), ``==`` with a list, ``+`` (gives a list), ``repr``.
Values come back as Python ``int``/``float``; log-probs are kept in float64 so what an engine
returned (and what a JSON file holds) round-trips exactly.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, repeat
from typing import Any, overload

MIN_GAP = 16  # zero runs shorter than this, found when building from values, are stored as numbers
REPR_ITEMS = 64  # longer sequences show this many values in their repr


class _ListLike(Sequence):  # type: ignore[type-arg]
    """Shared list behaviour on top of ``tolist``, ``__len__`` and ``__iter__``."""

    __slots__ = ()

    def tolist(self) -> list[Any]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, _ListLike)):
            return len(self) == len(other) and self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list is

    def __add__(self, other: Iterable[Any]) -> list[Any]:
        return self.tolist() + list(other)

    def __radd__(self, other: Iterable[Any]) -> list[Any]:
        return list(other) + self.tolist()

    def __repr__(self) -> str:
        # Short ones print as a list; a long one prints its ends and its length. A full repr of an
        # episode's millions of tokens is never useful, and asyncio.run builds the repr of the
        # returned Trajectory (through repr(task) when restoring the SIGINT handler), which cost
        # a 3.5M-token episode hundreds of MiB for a string it then cuts to 30 characters.
        n = len(self)
        if n <= REPR_ITEMS:
            return repr(self.tolist())
        half = REPR_ITEMS // 2
        head, tail = repr(self[:half])[:-1], repr(self[n - half:])[1:]
        return f"{head}, ... {n - 2 * half} more ..., {tail}"



class PackedInts(_ListLike):
    """Integers in an :class:`array.array` (``'i'``: 4 bytes, token ids; ``'b'``: 1 byte, masks)."""

    __slots__ = ("_a",)

    def __init__(self, typecode: str, values: Iterable[int] = ()) -> None:
        self._a = array(typecode)
        self.extend(values)

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (Ray, multiprocessing) as the packed array
        return (PackedInts, (self._a.typecode, self._a))

    def extend(self, values: Iterable[int]) -> None:
        if isinstance(values, PackedInts):
            values = values._a
        if isinstance(values, array) and values.typecode == self._a.typecode:
            self._a.extend(values)
        elif isinstance(values, (list, tuple)):
            self._a.extend(values)
        else:
            self._a.extend(int(v) for v in values)

    def append(self, value: int) -> None:
        self._a.append(value)

    def tolist(self) -> list[int]:
        return self._a.tolist()

    @property
    def typecode(self) -> str:
        return self._a.typecode

    def count(self, value: Any) -> int:
        return self._a.count(value)

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        return self._a.index(value, start, len(self._a) if stop is None else stop)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored numbers (the object's own small header excluded)."""
        return self._a.buffer_info()[1] * self._a.itemsize

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Iterator[int]:
        return iter(self._a)

    def __contains__(self, value: object) -> bool:
        return value in self._a

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return self._a[i].tolist()
        return self._a[i]

    def __setitem__(self, i: int, value: int) -> None:
        self._a[i] = value


def _is_plain_zero(x: float) -> bool:
    return x == 0.0 and math.copysign(1.0, x) > 0  # -0.0 is kept as a number, so JSON gives it back


class SparseFloats(_ListLike):
    """Floats that are mostly 0.0: stored runs of numbers at known offsets, zeros everywhere else.

    ``extend_zeros(n)`` (a prompt or tool turn) costs nothing per token; ``extend(values)``
    (a generated turn) stores its numbers as given. Built from a whole list (``from_dict``),
    zero runs of at least :data:`MIN_GAP` become gaps.
    """

    __slots__ = ("_len", "_starts", "_runs")

    def __init__(self, values: Iterable[float] = ()) -> None:
        self._len = 0
        self._starts: list[int] = []
        self._runs: list[array] = []
        vals = [float(v) for v in values]
        n, i, pending = len(vals), 0, 0  # vals[pending:i] are numbers not stored yet
        while i < n:
            if not _is_plain_zero(vals[i]):
                i += 1
                continue
            j = i
            while j < n and _is_plain_zero(vals[j]):
                j += 1
            if j - i >= MIN_GAP or j == n:  # a long zero run, or the trailing zeros: a gap
                self.extend(vals[pending:i])
                self.extend_zeros(j - i)
                pending = j
            i = j
        self.extend(vals[pending:])

    def __reduce__(self) -> tuple[Any, ...]:  # pickles as its runs, not as a list of floats
        return (_restore_sparse, (self._len, self._starts, self._runs))

    def extend_zeros(self, n: int) -> None:
        self._len += n

    def extend(self, values: Iterable[float]) -> None:
        vals = array("d", values)
        if not vals:
            return
        if self._runs and self._starts[-1] + len(self._runs[-1]) == self._len:
            self._runs[-1].extend(vals)
        else:
            self._starts.append(self._len)
            self._runs.append(vals)
        self._len += len(vals)

    def tolist(self) -> list[float]:
        out: list[float] = []
        pos = 0
        for start, run in zip(self._starts, self._runs):
            out.extend(repeat(0.0, start - pos))
            out.extend(run.tolist())
            pos = start + len(run)
        out.extend(repeat(0.0, self._len - pos))
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the stored numbers and of the run bookkeeping (object headers excluded)."""
        return sum(r.buffer_info()[1] * 8 for r in self._runs) + 16 * len(self._runs)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[float]:
        parts: list[Iterable[float]] = []
        pos = 0
        for start, run in zip(self._starts, self._runs):
            parts += [repeat(0.0, start - pos), run]
            pos = start + len(run)
        parts.append(repeat(0.0, self._len - pos))
        return chain.from_iterable(parts)

    @overload
    def __getitem__(self, i: int) -> float: ...
    @overload
    def __getitem__(self, i: slice) -> list[float]: ...
    def __getitem__(self, i: int | slice) -> float | list[float]:
        if isinstance(i, slice):
            return self._slice(i)
        n = i + self._len if i < 0 else i
        if not 0 <= n < self._len:
            raise IndexError("index out of range")
        k = bisect_right(self._starts, n) - 1
        if k >= 0 and n < self._starts[k] + len(self._runs[k]):
            return self._runs[k][n - self._starts[k]]
        return 0.0

    def _slice(self, i: slice) -> list[float]:
        start, stop, step = i.indices(self._len)
        if step != 1:
            return self.tolist()[i]
        out: list[float] = []
        pos = start
        for s, run in zip(self._starts, self._runs):  # only the runs the slice overlaps are read
            if s >= stop:
                break
            if s + len(run) <= pos:
                continue
            out.extend(repeat(0.0, max(s - pos, 0)))
            pos = max(pos, s)
            end = min(s + len(run), stop)
            out.extend(run[pos - s:end - s].tolist())
            pos = end
        out.extend(repeat(0.0, max(stop - pos, 0)))
        return out


def _restore_sparse(length: int, starts: list[int], runs: list[array]) -> SparseFloats:
    out = SparseFloats()
    out._len, out._starts, out._runs = length, list(starts), list(runs)
    return out
