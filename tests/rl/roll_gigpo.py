"""Load ROLL's own GiGPO code from a ROLL checkout (``MEMRL_ROLL_REPO``) with its heavy imports stubbed.

Only the modules the computation runs are loaded from ROLL's files (``DataProto`` and its ``BatchProxy``,
``roll/pipeline/agentic/utils.py``, and ``RewardNormalizationConfig`` taken out of ``agentic_config.py``);
ray, logging, platforms, the transfer backend and the config tree are stand-ins that the computation
never reaches. Nothing of ROLL is copied into memrl. Needs ``tensordict`` (``DataProto`` is built on it).
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch


_STUBBED = {"imageio", "codetiming"}


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class _Timer:
    last = 0.0

    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __enter__(self) -> "_Timer":
        return self

    def __exit__(self, *a: Any) -> None:
        return None


def _norm_config(repo: Path) -> Any:
    """ROLL's RewardNormalizationConfig and its defaults resolver, executed from agentic_config.py's source."""
    src = (repo / "roll/pipeline/agentic/agentic_config.py").read_text()
    wanted = {"_resolve_reward_norm_defaults", "RewardNormalizationConfig"}
    body = [n for n in ast.parse(src).body if getattr(n, "name", None) in wanted]
    ns: dict[str, Any] = {}
    exec("from dataclasses import dataclass, field\nfrom typing import *\n", ns)
    ns["logger"] = logging.getLogger("roll-stub")
    exec(compile(ast.Module(body=body, type_ignores=[]), "agentic_config.py", "exec"), ns)
    return ns["RewardNormalizationConfig"]


def load_roll(repo: Path) -> tuple[types.ModuleType, Any, Any]:
    """(ROLL's agentic utils module, its DataProto, its RewardNormalizationConfig)."""
    saved = {n: m for n, m in sys.modules.items() if n in _STUBBED or n.split(".")[0] == "roll"}
    try:
        for pkg in ("roll", "roll.distributed", "roll.distributed.scheduler", "roll.pipeline",
                    "roll.pipeline.agentic", "roll.pipeline.rlvr", "roll.utils"):
            _stub(pkg).__path__ = []  # type: ignore[attr-defined]
        _stub("codetiming", Timer=_Timer)
        _stub("imageio")
        _stub("roll.utils.logging", get_logger=lambda *a, **k: logging.getLogger("roll-stub"))
        _stub("roll.platforms", current_platform=types.SimpleNamespace(
            is_npu=lambda: False, is_available=lambda: False))
        _stub("roll.distributed.scheduler.transfer_backend")
        _stub("roll.utils.functionals", union_two_dict=lambda a, b: {**a, **b}, divide_by_chunk_size=None,
              masked_whiten=None, compute_gae_advantage_return=None, compute_clip_fraction=None,
              compute_reinforce_return=None, compute_approx_kl=None)
        _stub("roll.pipeline.rlvr.utils", DUMPING_FUNC={})
        norm = _norm_config(repo)
        _stub("roll.pipeline.agentic.agentic_config", AgenticConfig=object, RewardNormalizationConfig=norm)
        _load("roll.distributed.scheduler.remote_protocol", repo / "roll/distributed/scheduler/remote_protocol.py")
        proto = _load("roll.distributed.scheduler.protocol", repo / "roll/distributed/scheduler/protocol.py")
        utils = _load("roll.pipeline.agentic.utils", repo / "roll/pipeline/agentic/utils.py")
        return utils, proto.DataProto, norm
    finally:  # only the stand-ins and ROLL's modules leave; what tensordict imported of torch stays
        for name in [n for n in sys.modules if n in _STUBBED or n.split(".")[0] == "roll"]:
            del sys.modules[name]
        sys.modules.update(saved)


def roll_gigpo(repo: Path, step_scores: list[list[float]], episode_scores: list[float], groups: list[str],
               states: list[list[str]], *, gamma: float, episode_weight: float, step_weight: float,
               method: str = "mean_std", estimator: str = "gigpo") -> tuple[torch.Tensor, torch.Tensor]:
    """(step returns, response-level rewards) of ROLL for episodes given as per-step scores and states.

    Rows are laid out episode by episode, steps in order; episode e belongs to prompt group groups[e].
    """
    utils, DataProto, norm = load_roll(repo)
    traj, step, scores, ep_scores, grp, st = [], [], [], [], [], []
    for e, (rs, ss) in enumerate(zip(step_scores, states)):
        for t, (r, s) in enumerate(zip(rs, ss)):
            traj.append(f"traj{e}"), step.append(t), scores.append(r), ep_scores.append(episode_scores[e])
            grp.append(groups[e]), st.append(s)

    def arr(xs: list[Any]) -> np.ndarray:
        return np.array(xs, dtype=object)

    batch = DataProto.from_dict({"scores": torch.zeros(len(traj), 4)}, non_tensors={
        "traj_id": arr(traj), "step": arr(step), "step_scores": arr(scores), "episode_scores": arr(ep_scores),
        "traj_group_id": arr(grp), "state_hash": arr(st)})
    batch = utils.compute_discounted_returns(batch, estimator, gamma)
    config = types.SimpleNamespace(
        adv_estimator=estimator, reward_normalization=norm(grouping="traj_group_id", method=method),
        episode_reward_weight=episode_weight, step_reward_weight=step_weight, reward_clip=None)
    out, _ = utils.compute_response_level_rewards(batch, config)
    return out.batch["step_rewards"].clone(), out.batch["response_level_rewards"].clone()
