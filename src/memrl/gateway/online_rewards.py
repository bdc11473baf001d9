"""What an agent reports about its episode: the reward, metrics and per-call (turn) rewards.

The same shape whether a program returns it, a command prints it, or an external agent posts it
(``POST /episodes/<id>/reward`` with the episode's key, ``POST /rl/episodes/<id>/reward`` with the
session key)::

    {"reward": 1.0, "metrics": {"steps": 3}, "turn_rewards": [{"call": 0, "reward": 0.5}, {"call": -1, "reward": 1}]}

**Call index.** Call ``i`` is the ``i``-th model call of the episode that the gateway answered with
a generation, counted from 0 over every API (chat completions, completions, Responses, Messages,
streamed or not); a refused request (a 400, the call cap) is not a call. ``-1`` is the latest call,
as in Python. ``turn_rewards`` may also be a plain list of numbers, item ``i`` for call ``i``.

**Where it lands.** A call's reward is added to the conversation that recorded it
(:meth:`memrl.workflows.Episode.turn_reward`'s rule): calls the gateway merged into one conversation
(each prompt extending the previous call token for token) sum their rewards, since the per-turn
estimators (``gigpo``, ``step_reinforce``) give one advantage per conversation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memrl.plugins import MAX_REWARD
from memrl.workflows.metric_names import TRAINER_METRICS, TRAINER_PREFIXES

OUTCOME_KEYS = ("reward", "metrics", "turn_rewards")


class BadField(ValueError):
    """A reported value that cannot be used, with the field it was in (an HTTP 400 names it)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


@dataclass
class Outcome:
    """A checked report: ``reward`` None when only turn rewards were posted."""

    reward: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    turn_rewards: list[tuple[int, float]] = field(default_factory=list)  # (call index, reward)


def _finite(value: Any, param: str) -> float:
    """A finite number (not a bool) within ±MAX_REWARD: a NaN or huge reward would make its step's whole
    update non-finite, every other agent's episodes with it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadField(param, "must be a finite number")
    if abs(value) > MAX_REWARD:
        raise BadField(param, f"must lie within ±{MAX_REWARD:g}")
    return float(value)


def turn_rewards_of(value: Any, param: str = "turn_rewards") -> list[tuple[int, float]]:
    """``[{"call": i, "reward": r}, ...]`` or ``[r0, r1, ...]`` as (call index, reward) pairs."""
    if not isinstance(value, list):
        raise BadField(param, 'must be a list of {"call": i, "reward": r} (or of numbers, one per call)')
    out = []
    for k, item in enumerate(value):
        where = f"{param}[{k}]"
        if isinstance(item, Mapping):
            extra = sorted(set(item) - {"call", "reward"})
            if extra:
                raise BadField(f"{where}.{extra[0]}", "unknown field (an item is {\"call\": i, \"reward\": r})")
            call = item.get("call")
            if isinstance(call, bool) or not isinstance(call, int):
                raise BadField(f"{where}.call", "must be an integer (the call's index from 0; -1 is the latest)")
            out.append((call, _finite(item.get("reward"), f"{where}.reward")))
        else:
            out.append((k, _finite(item, where)))
    return out


MAX_METRICS = 64  # metric names one episode may post with its reward
MAX_METRIC_NAME = 200


def outcome_of(body: Any, *, need_reward: bool) -> Outcome:
    """``body`` (a JSON object) checked whole; ``need_reward``: the episode's reward must be in it."""
    if not isinstance(body, Mapping):
        raise BadField("body", 'must be a JSON object such as {"reward": 1.0}')
    extra = sorted(set(body) - set(OUTCOME_KEYS))
    if extra:
        raise BadField(str(extra[0]), f"unknown field (accepted: {', '.join(OUTCOME_KEYS)})")
    if need_reward and body.get("reward") is None:
        raise BadField("reward", "is required (the episode's outcome reward, a number)")
    reward = None if body.get("reward") is None else _finite(body["reward"], "reward")
    metrics = body.get("metrics") or {}
    if not isinstance(metrics, Mapping):
        raise BadField("metrics", "must be an object of numbers")
    if len(metrics) > MAX_METRICS:  # each name is a column of metrics.jsonl and a panel of memrl view
        raise BadField("metrics", f"{len(metrics)} names, at most {MAX_METRICS} per episode")
    long = [str(k) for k in metrics if len(str(k)) > MAX_METRIC_NAME]
    if long:
        raise BadField("metrics", f"name {long[0][:40]!r}... is longer than {MAX_METRIC_NAME} characters")
    taken = [str(k) for k in metrics if str(k) in TRAINER_METRICS or str(k).startswith(TRAINER_PREFIXES)]
    if taken:
        raise BadField(f"metrics.{taken[0]}", "is a name the trainer writes itself; give the metric another name")
    checked = {str(k): _finite(v, f"metrics.{k}") for k, v in metrics.items()}
    turns = turn_rewards_of(body["turn_rewards"]) if body.get("turn_rewards") is not None else []
    return Outcome(reward, checked, turns)


def resolve_calls(recorded: Sequence[Any], turns: Sequence[tuple[int, float]],
                  param: str = "turn_rewards") -> list[tuple[Any, float]]:
    """(conversation, reward) of each (call index, reward): the conversation that recorded that call."""
    out = []
    n = len(recorded)
    for k, (call, reward) in enumerate(turns):
        if not -n <= call < n:
            made = f"the episode has made {n} call{'s' if n != 1 else ''} so far"
            raise BadField(f"{param}[{k}].call", f"no call {call}: {made} (0 is the first, -1 the latest)")
        out.append((recorded[call], reward))
    return out


def apply_turn_rewards(pairs: Sequence[tuple[Any, float]]) -> None:
    """Add each reward to its conversation (on the episode's loop, which owns the conversations)."""
    for conv, reward in pairs:
        conv.reward = (conv.reward or 0.0) + reward
