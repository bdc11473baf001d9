"""Workflows: async agent loops that turn a sample into a scored Trajectory."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from memrl.types import Trajectory

Workflow = Callable[..., Awaitable[Trajectory]]
NAMES = ("memagent", "rememr1", "full_context", "tool_agent")


def get_workflow(name: str) -> Workflow:
    """The workflow function registered under ``name``."""
    if name == "memagent":
        from memrl.workflows.memagent import memagent

        return memagent
    if name == "rememr1":
        from memrl.workflows.rememr1 import rememr1

        return rememr1
    if name == "full_context":
        from memrl.workflows.full_context import full_context

        return full_context
    if name == "tool_agent":
        from memrl.workflows.tool_agent import tool_agent

        return tool_agent
    raise ValueError(f"unknown workflow {name!r}; choose {', '.join(NAMES)}")


def load_samples(cfg: Any, split: str) -> list[Any]:
    """The samples a workflow runs on: ``split`` is 'train' or 'eval'.

    QA workflows read ``data.train_file`` / ``data.eval_file``; ``tool_agent``
    takes the tasks of ``env.train_split`` / ``env.eval_split`` of ``env.domain``.
    """
    if cfg.workflow.name == "tool_agent":
        from memrl.workflows.tool_agent import task_samples

        return task_samples(cfg, cfg.env.train_split if split == "train" else cfg.env.eval_split)
    from memrl.data import read_samples

    path = cfg.data.train_file if split == "train" else cfg.data.eval_file
    if path is None:
        if split == "train":
            raise ValueError("data.train_file is not set")
        return []
    return list(read_samples(path))


__all__: list[Any] = ["Workflow", "get_workflow", "load_samples", "NAMES"]
