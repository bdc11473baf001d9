"""The open episodes of a gateway: one id, one key and one event loop each.

The HTTP server runs in its own thread; an episode lives on the event loop of whoever runs
it (the trainer's rollout, an asynchronous producer, ``memrl eval``). A request is looked up
here by the episode id in its URL, checked against that episode's key, and its model call is
handed to the episode's own loop, so the episode's bookkeeping (and the tokenizer and engine
it uses) is touched from one thread only. A finished episode is removed at once: a late
request gets a 404 and can never reach another episode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import secrets
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from memrl.serve.errors import APIError


@dataclass
class CallSettings:
    """How the calls of one episode are served (from the agent workflow's options)."""

    max_calls: int = 64
    max_tokens: int = 1024
    merge: bool = True
    request_sampling: bool = True
    tool_parser: Any = None  # a function text -> ParsedTurn


@dataclass
class Session:
    """One episode as the gateway sees it."""

    id: str
    key: str
    episode: Any
    loop: asyncio.AbstractEventLoop
    settings: CallSettings
    calls: int = 0
    invalid_tool_calls: int = 0
    failure: BaseException | None = None  # what makes the episode fail once the program returns
    inflight: set[concurrent.futures.Future[Any]] = field(default_factory=set)
    closed: bool = False
    responses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # /v1/responses kept for chaining
    response_objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # ... and for retrieve()
    recorded: list[Any] = field(default_factory=list)  # the conversation of each call, by call index
    turn_rewards: list[tuple[Any, float]] = field(default_factory=list)  # posted (conversation, reward), not applied
    online: Any = None  # the episode's online record (memrl.gateway.online), when an external agent runs it

    def fail(self, error: BaseException) -> None:
        """Remember the first reason the episode must fail (a later one is a consequence)."""
        if self.failure is None:
            self.failure = error

    def count_call(self) -> None:
        """Count a model call about to generate; past the episode's cap it is refused and the episode fails.

        Called on the episode's loop once the request was checked: a request refused with a 400 (a
        template error, a prompt too long) cost no generation and does not count, as the APIs bill it.
        An episode that already failed (a call that raised, the cap) gets a 410 (not retried by the SDKs).
        """
        if self.failure is not None:  # discarded whatever comes next: generating more would only waste the engine
            raise APIError(410, f"this episode failed ({' '.join(str(self.failure).split())[:200]}) and will be "
                           "discarded; no further calls are served", code="episode_failed")
        self.calls += 1
        if self.calls > self.settings.max_calls:
            limit = self.settings.max_calls
            self.fail(RuntimeError(f"it made more than {limit} model calls in one episode (workflow.options.max_calls)"))
            raise APIError(403, f"this episode has made its {limit} model calls (workflow.options.max_calls); "
                           "it will be discarded", code="call_limit_exceeded")

    def run(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Schedule ``coro`` on the episode's loop; closing the session cancels it."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self.inflight.add(future)
        future.add_done_callback(self.inflight.discard)
        return future

    def run_live(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """:meth:`run` for a request: an episode whose loop is gone (it has finished) is the client's 404."""
        try:
            return self.run(coro)
        except RuntimeError:
            coro.close()
            raise APIError(404, f"episode {self.id!r} is finished", code="episode_not_found") from None


class Sessions:
    """Thread-safe table of open episodes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Session] = {}

    def open(self, episode: Any, loop: asyncio.AbstractEventLoop, settings: CallSettings) -> Session:
        session = Session(secrets.token_hex(8), "sk-ep-" + secrets.token_urlsafe(24), episode, loop, settings)
        with self._lock:
            self._open[session.id] = session
        return session

    def close(self, session: Session) -> None:
        with self._lock:
            self._open.pop(session.id, None)
            session.closed = True
        for future in list(session.inflight):
            future.cancel()

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def get(self, episode_id: str, authorization: str) -> Session:
        """The open episode ``episode_id`` if the bearer key is its own; else a 404 or a 401."""
        with self._lock:
            session = self._open.get(episode_id)
        if session is None:
            raise APIError(404, f"episode {episode_id[:40]!r} is unknown or finished", code="episode_not_found")
        if not hmac.compare_digest(authorization.encode(), f"Bearer {session.key}".encode()):
            raise APIError(401, "invalid or missing API key for this episode (send 'Authorization: Bearer KEY' with "
                           "the key given with its base URL)", code="invalid_api_key")
        return session

    def start_call(self, session: Session) -> None:
        """Refuse a call to an episode that has finished meanwhile (a 404)."""
        with self._lock:
            if session.closed:
                raise APIError(404, f"episode {session.id!r} is finished", code="episode_not_found")
