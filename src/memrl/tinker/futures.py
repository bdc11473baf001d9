"""Tinker's futures: every long operation answers a request id at once, and the client polls for its result.

The SDK posts a request (``forward_backward``, ``asample``, ...), gets ``{"request_id": ...}`` back, then
calls ``/api/v1/retrieve_future`` until the result is there. A poll is held open here until the result
arrives or ``poll_s`` passes, and then answered ``{"type": "try_again"}`` (the SDK polls again at once),
so a finished request is answered within milliseconds without the client spinning. Results live in
this process, keyed by request id, not by connection: a client whose connection dropped polls again on
a new one and gets the same result. A request the SDK posts twice (its own retry after a timeout)
carries the same ``(model, seq_id)`` and is mapped to the first request's id rather than run twice.
Finished entries are dropped oldest-first past ``keep`` (retrieved ones after ``retrieved_ttl_s``),
so a long run does not accumulate every batch's log-probs.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Hashable
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
            entry.done.set()

    def fail(self, rid: str, message: str, category: str = "user") -> None:
        entry = self._entries.get(rid)
        if entry is not None and not entry.done.is_set():
            entry.error, entry.category = message, category
            entry.done.set()

    async def wait(self, rid: str, timeout_s: float) -> Entry | None:
        """The entry once done, ``None`` if still pending after ``timeout_s``; ``KeyError`` if unknown."""
        entry = self._entries.get(rid)
        if entry is None:
            raise KeyError(rid)
        try:
            await asyncio.wait_for(asyncio.shield(entry.done.wait()), timeout_s)
        except asyncio.TimeoutError:
            return None
        if entry.retrieved_at is None:
            entry.retrieved_at = time.monotonic()
        return entry

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
