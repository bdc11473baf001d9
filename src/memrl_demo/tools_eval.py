"""Held-out scoring for the tools demo: greedy episodes on the test tickets, graded by τ²-bench's rules."""

from __future__ import annotations

import asyncio
import statistics
from collections import defaultdict
from typing import Any

from memrl.engines.base import SamplingParams
from memrl.envs.domain import Domain
from memrl.types import Trajectory
from memrl.workflows.tool_agent import TaskSample, tool_agent


def kind_of(task_id: str) -> str:
    return task_id.split("_", 1)[0]


async def _episodes(model: Any, tokenizer: Any, domain: Domain, split: str, workflow: Any) -> list[Trajectory]:
    from memrl.engines.hf import HFEngine

    engine = HFEngine(model, pad_token_id=tokenizer.pad_token_id)
    samples = [TaskSample(domain, t, solo=True) for t in domain.get_tasks(split)]
    trajs = await asyncio.gather(*(tool_agent(s, engine, tokenizer, workflow, sampling=SamplingParams(greedy=True))
                                   for s in samples))
    await engine.close()
    return list(trajs)


def tau2_reward(t: Trajectory) -> float:
    """The episode's τ²-bench reward, also when it trained on another reward (env.reward=progress)."""
    return t.metrics.get("tau2_reward", t.reward)


def summarize(trajs: list[Trajectory]) -> dict[str, Any]:
    """Success (% of episodes with τ² reward 1), tool-call validity (valid / attempted calls over all
    episodes; None when no episode made a call), turns per episode, and success per kind of ticket."""
    calls = sum(t.metrics["tool_calls"] for t in trajs)
    bad = sum(t.metrics["invalid_tool_calls"] + t.metrics["tool_errors"] for t in trajs)
    kinds: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        kinds[kind_of(t.sample_id)].append(tau2_reward(t))
    return {"success": 100.0 * statistics.fmean(float(tau2_reward(t) == 1.0) for t in trajs),
            "tool_call_validity": 100.0 * (calls - bad) / calls if calls else None,
            "turns": statistics.fmean(t.metrics["turns"] for t in trajs),
            "by_kind": {k: 100.0 * statistics.fmean(float(r == 1.0) for r in v) for k, v in sorted(kinds.items())},
            "episodes": len(trajs)}


def heldout(model: Any, tokenizer: Any, domain: Domain, workflow: Any, split: str = "test") -> dict[str, Any]:
    """Greedy held-out scores of ``model`` (see :func:`summarize`)."""
    return summarize(asyncio.run(_episodes(model, tokenizer, domain, split, workflow)))
