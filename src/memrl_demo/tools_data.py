"""Text and trajectories for the tools demo: the tokenizer's corpus and the sloppy teacher's episodes."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from memrl_demo.tools_tasks import TaskPlan
from memrl_demo.tools_teacher import SLIPS, ToolTeacherEngine, script
from memrl.envs.domain import Domain
from memrl.envs.evaluate import run_calls
from memrl.envs.messages import ToolCall
from memrl.types import Trajectory
from memrl.workflows.tool_agent import TaskSample, tool_agent
from memrl.text.tool_calls import FORMATS


def episode_text(domain: Domain, plan: TaskPlan, slip: bool, fmt_name: str = "qwen") -> str:
    """One whole episode as the model would see it (system, ticket, calls, results, reply)."""
    fmt = FORMATS[fmt_name]
    env = domain.new_env(solo=True)
    turns = script(plan, slip)
    task = next(t for t in domain.tasks if t.id == plan.id)
    calls = [ToolCall(name, dict(args)) for name, args in plan.calls][:len(turns) - 1]
    log = run_calls(domain, task, calls, solo=True)
    results = [m.content or "" for m in log if m.role == "tool"]
    parts = [fmt.system(env.policy, env.tool_schemas()), fmt.turn("user", plan.ticket)]
    for i, turn in enumerate(turns):
        parts.append(fmt.turn("assistant", turn))
        if i < len(results):
            parts.append(fmt.tool_results([results[i]]))
    return "".join(parts)


def corpus(domain: Domain, train: list[TaskPlan]) -> list[str]:
    """The tokenizer's training text: every training ticket's episode, with and without its slip."""
    out = [episode_text(domain, p, False) for p in train]
    out += [episode_text(domain, p, True) for p in train if p.kind in SLIPS]
    return out


async def _teacher_episodes(domain: Domain, plans: list[TaskPlan], tokenizer: Any, workflow: Any,
                            slip_p: float, seed: int) -> list[Trajectory]:
    rng = random.Random(seed)
    by_id = {t.id: t for t in domain.tasks}
    out = []
    for plan in plans:
        engine = ToolTeacherEngine(tokenizer, plan, slip_p, rng)
        traj = await tool_agent(TaskSample(domain, by_id[plan.id]), engine, tokenizer, workflow)
        traj.info["slipped"] = engine.slipped
        out.append(traj)
    return out


def teacher_trajectories(domain: Domain, plans: list[TaskPlan], tokenizer: Any, workflow: Any, *,
                         slip_p: float, seed: int, repeats: int = 1) -> list[Trajectory]:
    """``repeats`` teacher episodes per ticket (each draws its own slips), graded by the workflow."""
    return asyncio.run(_teacher_episodes(domain, plans * repeats, tokenizer, workflow, slip_p, seed))
