"""Workflows: async agent loops that turn a sample into a scored Trajectory."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from memrl.types import Trajectory

Workflow = Callable[..., Awaitable[Trajectory]]
NAMES = ("memagent", "rememr1", "full_context", "tool_agent")  # the built-ins (memrl.plugins.WORKFLOWS)


def get_workflow(name: str) -> Workflow:
    """The workflow registered under ``name``, or the plug-in at import path ``package.module:function``."""
    from memrl.plugins import WORKFLOWS

    return WORKFLOWS.get(name)


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
