"""memrl.rl.rollout_correction against verl's own ``compute_rollout_correction_and_rejection_mask``.

verl is not a dependency: set ``MEMRL_VERL_REPO`` to a verl checkout (a work tree, or a git
directory with the tag v0.9.0) and this test runs verl's ``rollout_corr_helper.py`` beside
memrl on 12 configurations, comparing weights, masks and every metric exactly.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from memrl.rl import rollout_correction

REPO = os.environ.get("MEMRL_VERL_REPO")
pytestmark = pytest.mark.skipif(not REPO, reason="set MEMRL_VERL_REPO to a verl checkout to compare with verl")

CONFIGS = [
    dict(rollout_is="token", rollout_is_threshold=2.0),
    dict(rollout_is="sequence", rollout_is_threshold=2.0),
    dict(rollout_is="token", rollout_is_threshold="0.5_5.0"),
    dict(rollout_is="sequence", rollout_is_threshold="0.5_1.5"),
    dict(rollout_is="token", rollout_is_threshold=1.5, rollout_is_batch_normalize=True),
    dict(rollout_is="sequence", rollout_is_threshold=3.0, rollout_is_batch_normalize=True),
    dict(rollout_is=None, rollout_rs="token_k1", rollout_rs_threshold="0.7_1.4"),
    dict(rollout_is="token", rollout_rs="token_k2,token_k3", rollout_rs_threshold="0.05,0.04"),
    dict(rollout_is="sequence", rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0"),
    dict(rollout_rs="seq_mean_k1", rollout_rs_threshold=1.1),
    dict(rollout_rs="seq_sum_k2,seq_sum_k3,seq_mean_k2,seq_mean_k3", rollout_rs_threshold="0.3,0.3,0.03,0.03"),
    dict(rollout_is="token", rollout_is_threshold="0.8_1.25", rollout_rs="seq_max_k2,seq_max_k3",
         rollout_rs_threshold="0.1"),
]


def _read(rel: str) -> str:
    assert REPO is not None
    path = Path(REPO) / rel
    if path.is_file():
        return path.read_text(encoding="utf-8")
    return subprocess.run(["git", "-C", REPO, "show", f"v0.9.0:{rel}"], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def verl_helper() -> types.ModuleType:
    """verl's rollout_corr_helper with its imports stubbed (masked_sum/mean are verl's own code)."""
    saved = dict(sys.modules)
    for name in ("verl", "verl.utils", "verl.trainer", "verl.trainer.config", "verl.workers",
                 "verl.workers.config"):
        sys.modules[name] = types.ModuleType(name)
    code = _read("verl/utils/torch_functional.py")
    tf = types.ModuleType("verl.utils.torch_functional")
    tf.__dict__["torch"] = torch
    exec(code[code.index("def masked_sum"):code.index("def masked_var")], tf.__dict__)
    proto = types.ModuleType("verl.protocol")
    proto.DataProto = type("DataProto", (), {"from_dict": classmethod(lambda cls, tensors: tensors)})
    algo = types.ModuleType("verl.trainer.config.algorithm")
    algo.RolloutCorrectionConfig = dict
    actor = types.ModuleType("verl.workers.config.actor")
    actor.PolicyLossConfig = dict
    sys.modules.update({"verl.utils.torch_functional": tf, "verl.protocol": proto,
                        "verl.trainer.config.algorithm": algo, "verl.workers.config.actor": actor})
    sys.modules["verl.utils"].torch_functional = tf
    mod = types.ModuleType("verl_rollout_corr_helper")
    exec(compile(_read("verl/trainer/ppo/rollout_corr_helper.py"), "rollout_corr_helper.py", "exec"), mod.__dict__)
    yield mod
    sys.modules.clear()
    sys.modules.update(saved)


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(7, 13, generator=gen) * 0.5 - 1.0
    rollout = old + torch.randn(7, 13, generator=gen) * 0.3
    mask = (torch.rand(7, 13, generator=gen) > 0.25).float()
    mask[3] = 0  # a row with no response tokens
    return old, rollout, mask


@pytest.mark.parametrize("cfg", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
def test_equal_to_verl(verl_helper: types.ModuleType, cfg: dict) -> None:
    old, rollout, mask = _inputs()
    v_weights, v_mask, v_metrics = verl_helper.compute_rollout_correction_and_rejection_mask(old, rollout, mask, **cfg)
    weights, m_mask, metrics = rollout_correction(old, rollout, mask, **cfg)
    if v_weights is None:
        assert weights is None
    else:
        assert torch.equal(v_weights["rollout_is_weights"], weights)
    assert torch.equal(v_mask, m_mask) and v_mask.dtype == m_mask.dtype
    assert set(v_metrics) == set(metrics)
    for key, value in v_metrics.items():
        assert (math.isnan(value) and math.isnan(metrics[key])) or value == metrics[key], key
