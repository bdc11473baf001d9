"""Workflows: an agent's loop as a small object (:class:`Workflow`), its bookkeeping in :class:`Episode`."""

from __future__ import annotations

from typing import Any

from memrl.workflows.api import Episode, Generation, Workflow, anchor

def get_workflow(name: str) -> Workflow:
    """The workflow registered under ``name`` (or the plug-in at ``package.module:Name``), default options."""
    from memrl.workflows.registry import make_workflow

    return make_workflow(name)


def build_workflow(cfg: Any, *, services: bool = True) -> Workflow:
    """The workflow of a whole config: its options, bound to the config, services built (once per run)."""
    workflow = cfg.workflow.build()
    return workflow.setup(cfg) if services else workflow.bind(cfg)


def load_samples(cfg: Any, split: str) -> list[Any]:
    """The samples of ``split`` ('train' or 'eval') that the config's workflow reads."""
    return build_workflow(cfg, services=False).load_samples(split)


__all__: list[Any] = ["Episode", "Generation", "Workflow", "anchor", "build_workflow", "get_workflow", "load_samples"]
