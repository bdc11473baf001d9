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

__all__ = [
    "agg_loss",
    "broadcast",
    "combine_step_advantages",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "entropy_from_logits",
    "episode_advantages",
    "keep_groups",
    "kl_penalty",
    "logprobs_from_logits",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "overlong_penalty",
]
