"""The reward routes: ``POST /episodes/<id>/reward`` always, and the online session's ``/rl/*``.

* ``POST /episodes/<id>/reward`` (the episode's own key): per-call rewards of a running episode
  (``{"turn_rewards": [...]}``, :mod:`memrl.gateway.online_rewards`); for an online episode also its
  reward and metrics. A program run by the workflow returns its reward instead, so a ``reward``
  posted for it is refused: two sources of one number would disagree.
* ``POST /rl/episodes`` (the session key): the oldest waiting episode, as ``{id, base_url,
  api_key, reward_url, sample, ...}``; if none waits within ``wait_s`` (default 4 s, below
  common clients' 5 s read timeout), a 503 with ``Retry-After``.
* ``POST /rl/episodes/<id>/reward`` (the session key or the episode's): its reward, once.
  Unknown: 404; posted twice: 409; after its timeout dropped it: 410.
* ``GET /rl/status`` (the session key): counts of waiting, running, rewarded and dropped episodes.

Every body is checked whole before anything changes: a 400 names the field.
"""

# No ``from __future__ import annotations`` here: FastAPI reads these annotations at run time.
import asyncio
import dataclasses
import hmac
import json
import math
import time
from typing import Any, Optional

from fastapi import Request

from memrl.gateway.online import OnlineEpisode, OnlineEpisodes
from memrl.gateway.online_rewards import BadField, Outcome, outcome_of, resolve_calls
from memrl.gateway.sessions import Sessions
from memrl.serve.errors import APIError, error_response

DEFAULT_WAIT_S = 4.0
MAX_WAIT_S = 300.0
_POLL_S = 0.05


async def _json(request: Request, empty: Any = None) -> Any:
    raw = await request.body()
    if not raw.strip():
        return empty
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise APIError(400, "body: not valid JSON", code="invalid_value", param="body") from None
    except RecursionError:  # thousands of nested brackets: no outcome is shaped like that
        raise APIError(400, "body: nested too deeply", code="invalid_value", param="body") from None


def _outcome(body: Any, need_reward: bool) -> Outcome:
    try:
        return outcome_of(body, need_reward=need_reward)
    except BadField as exc:
        raise APIError(400, str(exc), code="invalid_value", param=exc.param) from None


def _wait_s(body: Any) -> float:
    if body is None:
        return DEFAULT_WAIT_S
    if not isinstance(body, dict):
        raise APIError(400, 'body: must be a JSON object such as {"wait_s": 10}', code="invalid_value", param="body")
    extra = sorted(set(body) - {"wait_s"})
    if extra:
        raise APIError(400, f"{extra[0]}: unknown field (accepted: wait_s)", code="invalid_value", param=extra[0])
    wait = body.get("wait_s", DEFAULT_WAIT_S)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not (math.isfinite(wait)
                                                                             and 0 <= wait <= MAX_WAIT_S):
        raise APIError(400, f"wait_s: must be a number of seconds in [0, {MAX_WAIT_S:g}]", code="invalid_value",
                       param="wait_s")
    return float(wait)


def _key_of(record: OnlineEpisode, authorization: str) -> bool:
    return hmac.compare_digest(authorization.encode(), f"Bearer {record.session.key}".encode())


def _unauthorized(what: str) -> APIError:
    return APIError(401, f"invalid or missing key: send 'Authorization: Bearer KEY' with {what}",
                    code="invalid_api_key")


def _sample(sample: Any) -> Any:
    """The sample as an agent reads it: a dataclass (memrl eval's long-context samples) as a dict, as programs get
    it (:func:`memrl.gateway.program.plain_sample`); FastAPI encodes a copy, so the episode's own is untouched."""
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return dataclasses.asdict(sample)
    return sample


def handed_out(record: OnlineEpisode, root: str, model: str) -> dict[str, Any]:
    """What an agent needs to run the episode: where to call, with which key, on which sample."""
    ep = record.session.episode
    return {"id": record.id, "base_url": f"{root}/episodes/{record.id}/v1", "api_key": record.session.key,
            "reward_url": f"{root}/rl/episodes/{record.id}/reward", "model": model,
            "sample": _sample(ep.sample), "sample_id": ep.sample_id, "group_id": ep.group_id}


def add_reward_routes(app: Any, sessions: Sessions, online: Optional[OnlineEpisodes], model: str) -> None:
    """Register the reward routes (and, with ``online``, the online session's) on the gateway ``app``."""
    async def episode_reward(episode_id: str, request: Request) -> dict[str, Any]:
        auth = request.headers.get("authorization", "")
        record = online.get(episode_id) if online is not None else None
        if record is not None:
            if not _key_of(record, auth):
                raise _unauthorized("this episode's key")
            return _posted(online.post(episode_id, _outcome(await _json(request), False)))  # type: ignore[union-attr]
        session = sessions.get(episode_id, auth)
        outcome = _outcome(await _json(request), False)
        if outcome.reward is not None or outcome.metrics:
            param = "reward" if outcome.reward is not None else "metrics"
            raise APIError(400, f"{param}: this episode's program returns its reward and metrics; post only "
                           "turn_rewards here", code="unsupported", param=param)
        try:
            session.turn_rewards.extend(resolve_calls(session.recorded, outcome.turn_rewards))
        except BadField as exc:
            raise APIError(400, str(exc), code="invalid_value", param=exc.param) from None
        return {"id": episode_id, "turn_rewards": len(outcome.turn_rewards)}

    app.post("/episodes/{episode_id}/reward")(episode_reward)
    if online is not None:
        _add_rl_routes(app, online, model)


def _posted(record: OnlineEpisode) -> dict[str, Any]:
    return {"id": record.id, "status": record.state}


def _add_rl_routes(app: Any, online: OnlineEpisodes, model: str) -> None:
    def check(request: Request) -> None:
        if not online.authorized(request.headers.get("authorization", "")):
            raise _unauthorized("the session key (printed when the run started, or $MEMRL_SESSION_KEY)")

    async def new_episode(request: Request) -> Any:
        check(request)
        deadline = time.monotonic() + _wait_s(await _json(request))
        while (record := online.claim()) is None:
            if time.monotonic() >= deadline:
                answer = error_response(503, "no episode is waiting for an agent (the trainer is updating, or every "
                                        "episode of this step is handed out); ask again", code="no_episode_waiting")
                answer.headers["Retry-After"] = "1"
                return answer
            await asyncio.sleep(_POLL_S)
        return handed_out(record, str(request.base_url).rstrip("/"), model)

    async def rl_reward(episode_id: str, request: Request) -> dict[str, Any]:
        auth = request.headers.get("authorization", "")
        record = online.get(episode_id)
        if not online.authorized(auth) and not (record is not None and _key_of(record, auth)):
            raise _unauthorized("the session key or the episode's key")
        return _posted(online.post(episode_id, _outcome(await _json(request), True)))

    async def status(request: Request) -> dict[str, int]:
        check(request)
        return online.status()

    app.post("/rl/episodes")(new_episode)
    app.post("/rl/episodes/{episode_id}/reward")(rl_reward)
    app.get("/rl/status")(status)
