"""``adv_estimator=gdpo``: GDPO (arXiv 2601.05242) as verl 0.9 computes it (compute_gdpo_outcome_advantage: each
component GRPO-normalised in its group, weighted sum, whitened over the batch's tokens), on memrl's episodes
whose components are metrics; by hand, against verl's own function (MEMRL_VERL_REPO), through a training step,
and from a verl script."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import torch

from memrl.config.algorithm import AlgorithmConfig
from memrl.rl.advantages import broadcast, episode_advantages

VERL = os.environ.get("MEMRL_VERL_REPO")


def test_each_component_counts_in_its_own_group_scale():
    """Format rewards 0/1 and accuracy rewards 0/0.1 in one group of two: summed first, accuracy would be a
    tenth of the signal; normalised apart, both count the same (each +-0.7071 before the weights)."""
    comps = torch.tensor([[1.0, 0.0], [0.0, 0.1]])
    out = episode_advantages(torch.zeros(2), ["g", "g"], "gdpo", 1e-6, {"components": comps, "weights": [1.0, 2.0]})
    half = 1 / 2 ** 0.5
    assert out.tolist() == pytest.approx([half - 2 * half, -half + 2 * half], rel=1e-4)  # (the std's + 1e-6)


def test_the_token_stage_whitens_over_the_batchs_tokens():
    per_episode = torch.tensor([1.0, -1.0, 3.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    tok = broadcast(per_episode, [0, 1, 2], mask, "gdpo")
    values = tok[mask.bool()]
    assert values.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert values.var().item() == pytest.approx(1.0, rel=1e-4)  # verl's masked_whiten: unbiased variance


@pytest.mark.parametrize("settings, message", [
    ({"adv_estimator": "gdpo"}, "adv_estimator='gdpo' needs gdpo_reward_keys"),
    ({"gdpo_reward_keys": ["em"]}, "gdpo_reward_keys is read by adv_estimator=gdpo or normalize_then_sum only"),
    ({"adv_estimator": "gdpo", "gdpo_reward_keys": ["em", "f1"], "gdpo_reward_weights": [1.0]},
     "gdpo_reward_weights has 1 weights for 2 gdpo_reward_keys"),
])
def test_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmConfig(**settings)


@pytest.fixture(scope="module")
def verl_gdpo() -> Any:
    if not VERL:
        pytest.skip("set MEMRL_VERL_REPO to a verl checkout to compare with verl's own GDPO")
    from tests.rl.verl_policy_losses import verl_estimators

    return verl_estimators(str(VERL), "GRPO", "GDPO")["compute_gdpo_outcome_advantage"]


@pytest.mark.parametrize("seed", range(10))
def test_equal_to_verls_gdpo(verl_gdpo, seed):
    """Three components (binary, real, small), weights, groups of 2 to 5; one row per episode of random length."""
    from tests.rl.test_outcome_estimators import random_groups

    g, index = random_groups(seed, 3)
    b = len(index)
    comps = torch.stack([(torch.rand(b, generator=g) > 0.5).float(), torch.randn(b, generator=g),
                         torch.rand(b, generator=g) * 0.1], dim=1)
    mask = torch.zeros(b, 6)
    for i, n in enumerate(torch.randint(1, 7, (b,), generator=g).tolist()):
        mask[i, :n] = 1.0
    keys, weights = ["fmt", "acc", "len"], [1.0, 0.5, 2.0]
    config = {"gdpo_reward_keys": keys, "gdpo_reward_weights": weights}
    batch = {"prompts": torch.zeros(b, 3), "attention_mask": torch.cat([torch.ones(b, 3), mask], dim=1).long()}
    non_tensor = {k: comps[:, j].numpy() for j, k in enumerate(keys)}
    want, _ = verl_gdpo(torch.zeros(b, 6), mask, index, config=config, non_tensor_batch=non_tensor, batch=batch)
    ep = episode_advantages(torch.zeros(b), index.tolist(), "gdpo", 1e-6, {"components": comps, "weights": weights})
    torch.testing.assert_close(broadcast(ep, list(range(b)), mask, "gdpo"), want)


def test_a_training_step_reads_the_metrics_and_names_a_missing_one(tmp_path):
    """The QA workflow's em and answered metrics as components: the step trains; a metric no episode logs
    stops it with one line naming the episode and the metrics it has."""
    from memrl.models.resolve import load_tokenizer
    from memrl.train.trainer import Trainer
    from tests.train.helpers import coin_engine, config

    tok = load_tokenizer("tiny")
    over = {"algorithm__adv_estimator": "gdpo", "trainer__total_steps": 1}
    metrics = Trainer(config(tmp_path / "a", algorithm__gdpo_reward_keys=["em", "answered"], **over),
                      engine=coin_engine(tok)).train_step()
    assert metrics["train_rows"] > 0 and metrics["pg_loss"] == metrics["pg_loss"]
    with pytest.raises(ValueError, match="has no metric 'format' for algorithm.gdpo_reward_keys \\(its metrics: "):
        Trainer(config(tmp_path / "b", algorithm__gdpo_reward_keys=["format"], **over),
                engine=coin_engine(tok)).train_step()


def test_a_verl_gdpo_script_translates():
    from memrl.config.from_verl import translate

    t = translate({"algorithm.adv_estimator": "gdpo", "algorithm.gdpo_reward_keys": "'[format_reward,acc]'",
                   "algorithm.gdpo_reward_weights": "[1.0,0.5]"})
    assert t.settings["algorithm.adv_estimator"][0] == "gdpo"
    assert t.settings["algorithm.gdpo_reward_keys"][0] == ["format_reward", "acc"]
    assert t.settings["algorithm.gdpo_reward_weights"][0] == [1.0, 0.5]
    bare = translate({"algorithm.adv_estimator": "gdpo"})
    assert "algorithm.adv_estimator" not in bare.settings and "verl asserts" in bare.skipped["algorithm.adv_estimator"]


def test_a_tool_agent_metric_some_episodes_do_not_log_is_refused_as_a_component():
    """tool_call_validity is left out of an episode that made no call: as a component it would stop the first such
    step, so the tool agent refuses it before the run, naming the metrics that are always there."""
    from memrl.config import ConfigError, load_config
    from memrl.train.preflight import check_config

    over = ["workflow.name=tool_agent", "env.domain=library", "algorithm.adv_estimator=gdpo", "algorithm.n=2"]
    with pytest.raises(ConfigError, match="tool_call_validity is not logged for an episode that made no tool call; "
                                          "use made_tool_call"):
        check_config(load_config(None, [*over, "algorithm.gdpo_reward_keys=[tau2_reward,tool_call_validity]"]))
    check_config(load_config(None, [*over, "algorithm.gdpo_reward_keys=[tau2_reward,made_tool_call]"]))
