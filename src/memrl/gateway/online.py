"""Online sessions: episodes that external agents ask for, run, and reward later.

With ``workflow.options.mode: online`` the agent workflow runs no program. Each episode the
trainer starts is *offered* here and waits; an agent (any process, any language) asks for one
with ``POST /rl/episodes`` and gets the oldest offer: its id, base URL, key and sample. The
trainer starts ``algorithm.n`` episodes of each prompt one after another, so the ``n`` requesters
that come next get the same sample: a GRPO group. The agent makes its model calls on the base URL
and posts its reward (``POST /rl/episodes/<id>/reward``), which ends the episode.

Bookkeeping, thread by thread: :meth:`OnlineEpisodes.offer` and :meth:`~OnlineEpisodes.expire`
run on the episode's event loop; :meth:`~OnlineEpisodes.claim` and :meth:`~OnlineEpisodes.post`
on the HTTP server's, which hands results to the episode's loop with ``call_soon_threadsafe``.
Every state change happens under one lock, so a reward racing the timeout is either taken (the
episode trains) or refused (410: it was dropped), never both. An episode's record outlives it
(the last ``history`` of them) so a second reward gets a 409 naming it, not a 404.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from memrl.gateway.online_rewards import BadField, Outcome, resolve_calls
from memrl.serve.errors import APIError

WAITING, RUNNING, REWARDED, DROPPED, ENDED = "waiting", "running", "rewarded", "dropped", "ended"


@dataclass
class OnlineEpisode:
    """One offered episode: its gateway session, the futures its workflow awaits, and its state."""

    session: Any  # memrl.gateway.sessions.Session: id, key, episode, loop
    claimed: asyncio.Future[float]  # resolved (on the episode's loop) when an agent takes it
    outcome: asyncio.Future[Outcome]  # resolved with the posted reward
    state: str = WAITING
    claimed_at: float | None = None
    pairs: list[tuple[Any, float]] = field(default_factory=list)  # the final post's (conversation, reward)

    @property
    def id(self) -> str:
        return str(self.session.id)


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    """Set ``future`` from another thread; nothing if its loop or the episode is gone."""
    def set_it() -> None:
        if not future.done():
            future.set_result(value)

    try:
        future.get_loop().call_soon_threadsafe(set_it)
    except RuntimeError:  # the loop is closed: the episode ended
        pass


class OnlineEpisodes:
    """The offered episodes of a run, and the session key agents authenticate with."""

    def __init__(self, session_key: str, *, history: int = 4096) -> None:
        self.session_key = session_key
        self._lock = threading.Lock()
        self._waiting: collections.deque[OnlineEpisode] = collections.deque()
        self._known: collections.OrderedDict[str, OnlineEpisode] = collections.OrderedDict()
        self._history = history
        self.counts: collections.Counter[str] = collections.Counter()

    def authorized(self, authorization: str) -> bool:
        """Whether ``Authorization: Bearer KEY`` carries the session key (constant-time compare)."""
        return hmac.compare_digest(authorization.encode(), f"Bearer {self.session_key}".encode())

    # -- the episode's side (its own event loop) -------------------------------------------------------
    def offer(self, session: Any) -> OnlineEpisode:
        """Offer ``session``'s episode to the next agent that asks (from the episode's running loop)."""
        loop = asyncio.get_running_loop()
        record = OnlineEpisode(session, loop.create_future(), loop.create_future())
        session.online = record
        with self._lock:
            self._waiting.append(record)
            self.counts["offered"] += 1
        return record

    def expire(self, record: OnlineEpisode) -> bool:
        """Drop a running episode whose reward did not come in time; False if the reward just came."""
        with self._lock:
            if record.state != RUNNING:
                return False
            record.state = DROPPED
            self.counts["dropped"] += 1
            return True

    def withdraw(self, record: OnlineEpisode) -> None:
        """The episode's workflow is done with it (rewarded, dropped, or the run stopping)."""
        with self._lock:
            if record.state == WAITING:
                self._waiting.remove(record)
                record.state = ENDED
            elif record.state == RUNNING:
                record.state = ENDED

    # -- the HTTP side ------------------------------------------------------------------------------------
    def claim(self) -> OnlineEpisode | None:
        """The oldest waiting episode, now running; None if none waits."""
        with self._lock:
            if not self._waiting:
                return None
            record = self._waiting.popleft()
            record.state, record.claimed_at = RUNNING, time.monotonic()
            self._known[record.id] = record
            self._forget_old()
            self.counts["claimed"] += 1
        _resolve(record.claimed, record.claimed_at)
        return record

    def _forget_old(self) -> None:
        """Keep the records of the last ``history`` episodes handed out, and every running one (lock held)."""
        excess = len(self._known) - self._history
        if excess > 0:
            for key in [k for k, r in self._known.items() if r.state != RUNNING][:excess]:
                del self._known[key]

    def get(self, episode_id: str) -> OnlineEpisode | None:
        with self._lock:
            return self._known.get(episode_id)

    def post(self, episode_id: str, outcome: Outcome) -> OnlineEpisode:
        """Take ``outcome`` for ``episode_id``: a final reward ends the episode; turn rewards alone add up."""
        with self._lock:
            record = self._known.get(episode_id)
            if record is None:
                raise APIError(404, f"episode {episode_id[:40]!r} is unknown (ask for one with POST /rl/episodes)",
                               code="episode_not_found")
            _check_open(record)
            try:
                pairs = resolve_calls(record.session.recorded, outcome.turn_rewards)
            except BadField as exc:
                raise APIError(400, str(exc), code="invalid_value", param=exc.param) from None
            if outcome.reward is None:
                record.session.turn_rewards.extend(pairs)
                return record
            if record.session.failure is not None:  # e.g. past max_calls: its workflow fails it whatever the reward
                record.state = ENDED
                _resolve(record.outcome, outcome)
                raise APIError(410, f"episode {record.id!r} failed ({record.session.failure}); it will not be "
                               "trained on", code="episode_failed")
            if not record.session.recorded:
                raise APIError(400, f"reward: episode {record.id!r} has made no model call yet, so there is nothing "
                               "to train on; make its calls on base_url first", code="no_model_call", param="reward")
            record.state, record.pairs = REWARDED, pairs
            self.counts["rewarded"] += 1
        _resolve(record.outcome, outcome)
        return record

    def status(self) -> dict[str, int]:
        """How many episodes wait for an agent, run, and were offered / handed out / rewarded / dropped."""
        with self._lock:
            running = sum(1 for r in self._known.values() if r.state == RUNNING)
            return {"waiting": len(self._waiting), "running": running,
                    **{k: self.counts[k] for k in ("offered", "claimed", "rewarded", "dropped")}}


def _check_open(record: OnlineEpisode) -> None:
    """A 409/410 for an episode that takes no more rewards (lock held)."""
    if record.state == REWARDED:
        raise APIError(409, f"episode {record.id!r} already has its reward: a reward is posted once per episode",
                       code="reward_already_posted")
    if record.state == DROPPED:
        raise APIError(410, f"episode {record.id!r} was dropped: no reward came within workflow.options."
                       "episode_timeout_s of its hand-out", code="episode_expired")
    if record.state == ENDED:
        raise APIError(410, f"episode {record.id!r} has ended (the run is stopping or the episode failed)",
                       code="episode_ended")
