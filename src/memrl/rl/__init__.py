"""RL algorithms as pure tensor functions (verl ``core_algos`` numerics)."""

from memrl.rl.advantages import (
    broadcast,
    combine_step_advantages,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_rloo_outcome_advantage,
    episode_advantages,
)
from memrl.rl.dapo import keep_groups, overlong_penalty
from memrl.rl.functional import entropy_from_logits, logprobs_from_logits, masked_mean, masked_var, masked_whiten
from memrl.rl.losses import agg_loss, compute_policy_loss, kl_penalty
from memrl.rl.offpolicy import (
    OFF_POLICY_KINDS,
    decoupled_policy_loss,
    off_policy_kwargs,
    off_policy_loss,
    tis_policy_loss,
    truncated_is_weights,
)

__all__ = [
    "OFF_POLICY_KINDS",
    "agg_loss",
    "broadcast",
    "combine_step_advantages",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "decoupled_policy_loss",
    "entropy_from_logits",
    "episode_advantages",
    "keep_groups",
    "kl_penalty",
    "logprobs_from_logits",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "off_policy_kwargs",
    "off_policy_loss",
    "overlong_penalty",
    "tis_policy_loss",
    "truncated_is_weights",
]
