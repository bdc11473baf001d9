"""TRL's GRPOConfig names typed into memrl: answered with the key that means the same, with what to do when no
key does, and never with a key that accepts the value and trains differently (a nearest spelling did)."""

from __future__ import annotations

import pytest

from memrl.config import ConfigError, load_config
from memrl.config.algorithm import AlgorithmConfig
from memrl.config.from_verl import translate

A = "actor_rollout_ref.actor."


@pytest.mark.parametrize("override, answer", [
    ("temperature=0.7", "did you mean 'sampling.temperature'?"),  # was env.user.temperature, the user simulator's
    ("algorithm.temperature=0.7", "did you mean 'sampling.temperature'?"),
    ("algorithm.vllm_importance_sampling_clip_max=3", "'algorithm.rollout_correction.rollout_is_threshold'"),
    ("algorithm.vllm_importance_sampling_mode=token_mask", "'algorithm.rollout_correction.rollout_is'"),
    ("algorithm.steps_per_generation=2", "'trainer.mini_batches'"),
    ("top_entropy_quantile=0.2", "'algorithm.top_entropy_quantile'"),  # was algorithm.entropy_coef: a bonus of 0.2
    ("trainer.mask_truncated_completions=true", "'algorithm.mask_truncated_completions'"),
    ("trainer.max_prompt_length=512", "workflow"),  # was trainer.prompts_per_step: 512 prompts a step
    ("algorithm.loss_type=cispo", "algorithm.policy_loss for cispo"),
    ("trainer.gradient_accumulation_steps=4", "trainer.micro_batch_tokens"),
    ("use_bias_correction_kl=true", "'algorithm.kl_bias_correction'"),
    ("trainer.off_policy_mask_threshold=0.5", "'algorithm.off_policy_mask_threshold'"),
    ("vespo_k_neg=2", "'algorithm.vespo_k_neg'"),
    ("algorithm.loss_type=vespo", "algorithm.policy_loss for cispo, sapo, luspo and vespo"),
])
def test_trl_names_get_memrls_key_or_what_to_do(override, answer):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert answer in str(err.value)
    assert "entropy_coef" not in str(err.value) and "prompts_per_step" not in str(err.value)


def test_another_sections_temperature_is_not_taken_for_sampling():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["env.judge.temperature=0"])
    assert "did you mean 'sampling.temperature'?" not in str(err.value)  # the judge's, listed among the others


def test_a_leaf_of_several_sections_names_every_one():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["seed=1"])
    assert all(k in str(err.value) for k in ("'data.seed'", "'sampling.seed'", "'trainer.seed'"))


@pytest.mark.parametrize("loss", ["gspo", "cispo", "sapo", "geo_mean", "gpg", "clip_cov", "kl_cov"])
def test_a_dual_clip_set_with_a_loss_that_never_reads_it_is_refused(loss):
    """TRL's delta=1.05 with GSPO written as clip_ratio_c=1.05 trained unbounded and said nothing."""
    with pytest.raises(ValueError, match=f"clip_ratio_c .* read by policy_loss=vanilla or dppo_tv or dppo_kl only "
                                         f"\\(policy_loss is '{loss}'\\)"):
        AlgorithmConfig(policy_loss=loss, clip_ratio_c=1.05)
    assert AlgorithmConfig(policy_loss=loss, clip_ratio_c=3.0).clip_ratio_c == 3.0  # the default, as saved configs
    assert AlgorithmConfig(policy_loss="dppo_tv", clip_ratio_c=1.05).clip_ratio_c == 1.05


def test_verls_gspo_scripts_clip_ratio_c_is_left_out_with_the_reason():
    t = translate({A + "policy_loss.loss_mode": "gspo", A + "clip_ratio_c": "10.0"})
    assert "algorithm.clip_ratio_c" not in t.settings
    assert "does not read it" in t.skipped[A + "clip_ratio_c"]
    kept = translate({A + "policy_loss.loss_mode": "vanilla", A + "clip_ratio_c": "10.0"})
    assert kept.settings["algorithm.clip_ratio_c"][0] == 10.0


def test_a_clip_range_beside_a_loss_without_a_clip_is_left_out_or_refused():
    """verl's gpg / sapo never read clip_ratio_low/high: a script's value is skipped with the reason, and typed
    into memrl with such a loss (TRL's epsilon_high=0.28 kept when moving to vespo) it is refused."""
    t = translate({A + "policy_loss.loss_mode": "gpg", A + "clip_ratio_high": "0.28"})
    assert "algorithm.clip_ratio_high" not in t.settings and "has no clip" in t.skipped[A + "clip_ratio_high"]
    kept = translate({A + "policy_loss.loss_mode": "cispo", A + "clip_ratio_high": "0.28"})
    assert kept.settings["algorithm.clip_ratio_high"][0] == 0.28
    for loss in ("gpg", "sapo", "dro", "kl_cov", "vespo"):
        extra = {"dro_beta": 0.1} if loss == "dro" else {}
        with pytest.raises(ValueError, match=f"clip_ratio_low is read by .* \\(policy_loss is '{loss}', which has"):
            AlgorithmConfig(policy_loss=loss, clip_ratio_low=0.3, **extra)
