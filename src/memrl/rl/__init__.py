"""RL algorithms as pure tensor functions (verl ``core_algos`` numerics).

Advantage estimators, loss aggregations, KL estimators and off-policy corrections are registered
by name with the ``register_*`` decorators (the config validates ``algorithm.*`` names against
them); :func:`policy_objective` is the whole loss of one micro-batch.
"""

from memrl.rl.advantages import (
    AdvantageEstimator,
    broadcast,
    combine_step_advantages,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_rloo_outcome_advantage,
    episode_advantages,
    get_estimator,
    register_adv_est,
    turn_advantages,
)
from memrl.rl.turn_credit import (
    TurnRows,
    gigpo_advantages,
    group_norm,
    step_reinforce_advantages,
    turn_returns,
)
from memrl.rl.dapo import keep_groups, overlong_penalty
from memrl.rl.distill import discounted_future_sum, distill_advantages, reverse_kl
from memrl.rl.functional import entropy_from_logits, logprobs_from_logits, masked_mean, masked_var, masked_whiten
from memrl.rl.losses import (
    LossAggregation,
    agg_loss,
    compute_policy_loss,
    kl_penalty,
    loss_aggregation,
    register_kl,
    register_loss_agg,
)
from memrl.rl.rollout_corr import rollout_correction
from memrl.rl.objective import objective_metric_names, policy_objective
from memrl.rl.policy_losses import PolicyLoss, policy_loss, register_policy_loss
from memrl.rl.offpolicy import (
    OFF_POLICY_KINDS,
    OffPolicyCorrection,
    decoupled_policy_loss,
    off_policy_correction,
    off_policy_kwargs,
    off_policy_loss,
    tis_policy_loss,
    register_off_policy,
    truncated_is_weights,
)

__all__ = [
    "OFF_POLICY_KINDS",
    "AdvantageEstimator",
    "LossAggregation",
    "OffPolicyCorrection",
    "PolicyLoss",
    "TurnRows",
    "agg_loss",
    "broadcast",
    "combine_step_advantages",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "decoupled_policy_loss",
    "discounted_future_sum",
    "distill_advantages",
    "entropy_from_logits",
    "episode_advantages",
    "get_estimator",
    "gigpo_advantages",
    "group_norm",
    "keep_groups",
    "kl_penalty",
    "logprobs_from_logits",
    "loss_aggregation",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "objective_metric_names",
    "off_policy_correction",
    "off_policy_kwargs",
    "off_policy_loss",
    "overlong_penalty",
    "policy_objective",
    "register_adv_est",
    "register_kl",
    "register_loss_agg",
    "register_off_policy",
    "register_policy_loss",
    "policy_loss",
    "reverse_kl",
    "rollout_correction",
    "step_reinforce_advantages",
    "tis_policy_loss",
    "truncated_is_weights",
    "turn_advantages",
    "turn_returns",
]
