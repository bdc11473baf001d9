"""``algorithm.policy_loss_options`` / ``adv_estimator_options``: a plug-in's own settings from the config."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path

import pytest
import torch

from memrl import Trainer
from memrl.config import ConfigError, load_config
from memrl.rl.policy_losses import gspo_loss
from tests.train.test_turn_credit_train import WORDS, Steps

SEEN: list[tuple[str, float]] = []
HERE = "tests.train.test_plugin_options"


def scaled(old: torch.Tensor, logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, *, scale: float = 1.0,
           cliprange_low: float, cliprange_high: float, clip_ratio_c: float, loss_agg_mode: str,
           norm_length: int | None = None, weights: torch.Tensor | None = None):
    """GSPO times ``scale``, recording the scale the trainer passed."""
    SEEN.append(("loss", scale))
    loss, *rest = gspo_loss(old, logp, adv, mask, cliprange_low=cliprange_low, cliprange_high=cliprange_high,
                            clip_ratio_c=clip_ratio_c, loss_agg_mode=loss_agg_mode, norm_length=norm_length,
                            weights=weights)
    return (scale * loss, *rest)


def shifted(scores: torch.Tensor, group_ids: Sequence[Hashable], *, epsilon: float, shift: float = 0.0,
            ) -> torch.Tensor:
    """Group-free baseline: scores minus their mean, plus ``shift``."""
    SEEN.append(("estimator", shift))
    return scores - scores.mean() + shift


def test_the_trainer_passes_each_setting_to_its_plug_in(tmp_path: Path) -> None:
    SEEN.clear()
    cfg = {"model": {"path": "tiny"}, "engine": {"device": "cpu"},
           "algorithm": {"n": 4, "policy_loss": f"{HERE}:scaled", "policy_loss_options": {"scale": 0.25},
                         "adv_estimator": f"{HERE}:shifted", "adv_estimator_options": {"shift": 0.5}},
           "trainer": {"total_steps": 2, "prompts_per_step": 2, "lr": 1e-3, "output_dir": str(tmp_path / "run")}}
    Trainer(cfg, workflow=Steps(), train=WORDS).run()
    assert {kind for kind, _ in SEEN} == {"loss", "estimator"}
    assert all(value == (0.25 if kind == "loss" else 0.5) for kind, value in SEEN)
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "policy_loss_options:\n    scale: 0.25" in saved and "adv_estimator_options:\n    shift: 0.5" in saved


@pytest.mark.parametrize(("overrides", "error"), [
    ([f"algorithm.policy_loss={HERE}:scaled", "algorithm.policy_loss_options.scael=2"],
     "policy_loss_options.scael: tests.train.test_plugin_options:scaled has no keyword argument 'scael' "
     "(it takes scale)"),
    ([f"algorithm.policy_loss={HERE}:scaled", "algorithm.policy_loss_options.loss_agg_mode=token-mean"],
     "policy_loss_options.loss_agg_mode: memrl passes loss_agg_mode itself (from algorithm.loss_agg_mode)"),
    (["algorithm.policy_loss=cispo", "algorithm.policy_loss_options.scale=2"],
     "policy_loss_options is for a plug-in of your own; 'cispo' is built in"),
    (["algorithm.policy_loss_options.scale=2"], "'vanilla' is built in"),
    ([f"algorithm.adv_estimator={HERE}:shifted", "algorithm.adv_estimator_options.group_ids=1"],
     "adv_estimator_options.group_ids: tests.train.test_plugin_options:shifted has no keyword argument"),
    ([f"algorithm.adv_estimator={HERE}:shifted", "algorithm.adv_estimator_options.epsilon=1"],
     "memrl passes epsilon itself (from algorithm.epsilon)"),
])
def test_a_setting_the_plug_in_cannot_take_fails_when_the_config_loads(overrides: list[str], error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, overrides)


def test_a_plug_in_taking_any_keyword_gets_any_setting() -> None:
    cfg = load_config(None, ["algorithm.policy_loss=tests.train.test_policy_loss_train:spy",
                             "algorithm.policy_loss_options.anything=3"])
    assert cfg.algorithm.policy_loss_options == {"anything": 3}


def test_an_option_of_another_kind_than_its_default_is_refused_when_the_config_loads() -> None:
    over = [f"algorithm.adv_estimator={HERE}:shifted"]
    with pytest.raises(ConfigError, match=r"adv_estimator_options.shift: 'abc' is a str; the plug-in's default "
                                          r"\(0.0\) is a float"):
        load_config(None, [*over, "algorithm.adv_estimator_options.shift=abc"])
    assert load_config(None, [*over, "algorithm.adv_estimator_options.shift=2"]).algorithm.adv_estimator_options == {
        "shift": 2}  # an int is a float
