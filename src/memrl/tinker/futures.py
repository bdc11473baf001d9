"""Tinker's futures: every long operation answers a request id at once, and the client polls for its result.

The SDK posts a request (``forward_backward``, ``asample``, ...), gets ``{"request_id": ...}`` back, then
calls ``/api/v1/retrieve_future`` until the result is there. A poll is held open here until the result
arrives (it is answered the moment the job finishes) or ``poll_s`` passes, and then answered
``{"type": "try_again"}``: the SDK polls again at once, without a backoff sleep, and logs one
"Retrying request ... because of try_again" warning per such answer. ``poll_s`` defaults to 30 s, under
the SDK's 45 s HTTP timeout for a poll, so a long step costs one warning per 30 s and no client spins.
Results live in this process, keyed by request id, not by connection: a client whose connection dropped
polls again on a new one and gets the same result. A request the SDK posts twice (its own retry after a timeout)
carries the same ``(model, seq_id)`` and is mapped to the first request's id rather than run twice.
Finished entries are dropped oldest-first past ``keep`` (retrieved ones after ``retrieved_ttl_s``),
so a long run does not accumulate every batch's log-probs.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Entry:
    """One request's state: pending until ``done`` is set, then a JSON result, a protobuf result, or an error."""

    kind: str
    done: asyncio.Event = field(default_factory=asyncio.Event)
    json: Any = None
    proto: bytes | None = None
    error: str | None = None
    category: str = "user"  # RequestErrorCategory: user | server | unknown
    retrieved_at: float | None = None
    # Monotonic times, for the timing line (``--access-log``) and the latency bench: where a step's time goes.
    created: float = field(default_factory=time.monotonic)
    started: float | None = None
    finished: float | None = None


class FutureStore:
    """Request ids, their results, and long polls on them. Used from the event loop thread only."""

    def __init__(self, keep: int = 4096, retrieved_ttl_s: float = 600.0) -> None:
        # A per-process prefix, so an id from before a restart is never mistaken for a new request.
        self.boot = secrets.token_hex(3)
        self._counter = itertools.count(1)
        self._entries: dict[str, Entry] = {}
        self._by_key: dict[Hashable, str] = {}
        self.keep = keep
        self.retrieved_ttl_s = retrieved_ttl_s
        self.on_retrieved: Callable[[str, Entry], None] | None = None  # the timing line, when asked for

    def create(self, kind: str, dedupe: Hashable | None = None) -> tuple[str, bool]:
        """A new request id (``(id, True)``), or the id already given for ``dedupe`` (``(id, False)``)."""
        if dedupe is not None and dedupe in self._by_key and self._by_key[dedupe] in self._entries:
            return self._by_key[dedupe], False
        self._prune()
        rid = f"{self.boot}-{next(self._counter)}"
        self._entries[rid] = Entry(kind)
        if dedupe is not None:
            self._by_key[dedupe] = rid
        return rid, True

    def get(self, rid: str) -> Entry | None:
        return self._entries.get(rid)

    def resolve(self, rid: str, *, json: Any = None, proto: bytes | None = None) -> None:
        entry = self._entries.get(rid)
        if entry is not None and not entry.done.is_set():
            entry.json, entry.proto = json, proto
            entry.finished = time.monotonic()
            entry.done.set()

    def fail(self, rid: str, message: str, category: str = "user") -> None:
        entry = self._entries.get(rid)
        if entry is not None and not entry.done.is_set():
            entry.error, entry.category = message, category
            entry.finished = time.monotonic()
            entry.done.set()

    async def wait(self, rid: str, timeout_s: float, stop: Callable[[], bool] = lambda: False) -> Entry | None:
        """The entry as soon as it is done, ``None`` if still pending after ``timeout_s`` or once ``stop()``
        holds (checked every second: a draining server answers its held polls); ``KeyError`` if unknown.

        One waiter per poll, woken by ``resolve``/``fail`` the moment the result exists, so a finished
        request's poll returns within the event loop's latency, never at the next time slice.
        """
        entry = self._entries.get(rid)
        if entry is None:
            raise KeyError(rid)
        deadline = time.monotonic() + timeout_s
        waiter = asyncio.ensure_future(entry.done.wait())
        try:
            while not waiter.done() and not stop():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                await asyncio.wait({waiter}, timeout=min(1.0, left))
        finally:
            waiter.cancel()
        if not entry.done.is_set():
            return None
        if entry.retrieved_at is None:
            entry.retrieved_at = time.monotonic()
            if self.on_retrieved is not None:
                self.on_retrieved(rid, entry)
        return entry

    def started(self, rid: str) -> None:
        entry = self._entries.get(rid)
        if entry is not None and entry.started is None:
            entry.started = time.monotonic()

    def pending(self) -> list[str]:
        return [rid for rid, e in self._entries.items() if not e.done.is_set()]

    def _prune(self) -> None:
        now = time.monotonic()
        stale = [rid for rid, e in self._entries.items()
                 if e.retrieved_at is not None and now - e.retrieved_at > self.retrieved_ttl_s]
        finished = [rid for rid, e in self._entries.items() if e.done.is_set() and rid not in stale]
        stale += finished[: max(0, len(self._entries) - len(stale) - self.keep)]
        for rid in stale:
            del self._entries[rid]
        if stale:
            live = set(self._entries)
            self._by_key = {k: v for k, v in self._by_key.items() if v in live}


def timing_line(rid: str, entry: Entry) -> str:
    """Where one request's time went: waiting in the queue, running, and finished until its result was fetched."""
    def ms(a: float | None, b: float | None) -> str:
        return "-" if a is None or b is None else f"{(b - a) * 1000:.0f}"

    return (f"memrl tinker: {entry.kind} {rid}: queued {ms(entry.created, entry.started)} ms, ran "
            f"{ms(entry.started, entry.finished)} ms, fetched {ms(entry.finished, entry.retrieved_at)} ms after")
