"""Run verl-agent's own GiGPO code (``gigpo/core_gigpo.py`` of a checkout, ``MEMRL_VERL_AGENT_REPO``).

The file imports ``DataProto`` from verl only for type hints; a stand-in module answers that import, so
neither verl nor its dependencies are needed. Nothing of verl-agent is copied into memrl.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch


def load(repo: Path) -> types.ModuleType:
    """verl-agent's ``gigpo.core_gigpo`` module, loaded from ``repo``."""
    path = repo / "gigpo" / "core_gigpo.py"
    if "verl" not in sys.modules:
        stub = types.ModuleType("verl")
        stub.DataProto = object  # type: ignore[attr-defined]
        sys.modules["verl"] = stub
    spec = importlib.util.spec_from_file_location("verl_agent_core_gigpo", path)
    assert spec is not None and spec.loader is not None, f"no {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verl_agent_gigpo(repo: Path, rewards: list[list[float]], groups: list[str], states: list[list[str]], *,
                     gamma: float, step_weight: float, mode: str, similarity: float | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-step discounted returns, per-step GiGPO advantages) as verl-agent computes them.

    ``similarity``: verl-agent's ``enable_similarity`` with that ``similarity_thresh``.
    ``rewards[e]``: episode e's per-step rewards; each step row's token-level reward is the episode's sum
    (verl-agent's episode reward manager), placed on its last response token; 3-token responses.
    """
    core = load(repo)
    rows = [(e, t) for e in range(len(rewards)) for t in range(len(rewards[e]))]
    step_r = np.array([rewards[e][t] for e, t in rows], dtype=np.float32)
    batch = types.SimpleNamespace(
        non_tensor_batch={"rewards": step_r, "traj_uid": np.array([f"traj{e}" for e, _ in rows], dtype=object),
                          "active_masks": np.ones(len(rows), dtype=bool)},
        batch={"input_ids": torch.zeros(len(rows), 1, dtype=torch.long)})
    returns = core.compute_step_discounted_returns(batch, gamma)
    token_rewards = torch.zeros(len(rows), 3)
    token_rewards[:, -1] = torch.tensor([sum(rewards[e]) for e, _ in rows])
    adv: Any
    adv, _ = core.compute_gigpo_outcome_advantage(
        token_rewards, returns, torch.ones(len(rows), 3),
        np.array([states[e][t] for e, t in rows], dtype=object), np.array([groups[e] for e, _ in rows], dtype=object),
        np.array([f"traj{e}" for e, _ in rows], dtype=object), step_advantage_w=step_weight, mode=mode,
        **({} if similarity is None else {"enable_similarity": True, "similarity_thresh": similarity}))
    return returns, adv[:, -1]
