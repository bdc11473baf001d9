"""Config of the RL algorithm (``algorithm.*``): advantage estimator, policy loss, KL, off-policy correction."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from memrl.config.section import Section


class AlgorithmConfig(Section):
    """Advantage estimator and PPO-style loss (verl semantics; MemAgent's settings noted)."""

    adv_estimator: Literal["grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"] = "grpo"
    n: int = Field(8, ge=1, description="Episodes per prompt (the GRPO group); MemAgent uses 16.")
    epsilon: float = Field(1e-6, gt=0, description="Added to the group std (grpo).")
    gamma: float = Field(1.0, ge=0, le=1, description="Discount for reinforce_plus_plus.")
    clip_ratio_low: float = Field(0.2, ge=0, lt=1, description="PPO clips the ratio below at 1 - clip_ratio_low, "
                                  "which must stay positive.")
    clip_ratio_high: float = Field(0.2, ge=0, description="DAPO clip-higher uses 0.28.")
    clip_ratio_c: float = Field(3.0, gt=1, description="Dual-clip bound for negative advantages.")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm"] = "token-mean"
    kl_coef: float = Field(0.0, ge=0, description="KL loss weight; MemAgent uses 0.001.")
    kl_estimator: Literal["k1", "abs", "k2", "mse", "k3", "low_var_kl"] = "low_var_kl"
    entropy_coef: float = Field(0.0, ge=0)
    ppo_epochs: int = Field(1, ge=1)
    dynamic_sampling: bool = Field(False, description="DAPO: drop groups whose rewards are all equal, refill.")
    max_gen_batches: int = Field(4, ge=1, description="Dynamic sampling: rollout rounds per step before giving up.")
    step_rewards: bool = Field(False, description="ReMemR1: mix per-turn state advantages (workflow.state_reward_alpha).")
    off_policy: Literal["none", "decoupled", "tis"] = Field(
        "none", description="Policy-loss correction for samples the engine drew under other weights: none (PPO "
        "against the trainer's recomputed log-probs), decoupled (AReaL: clip against those, times the behaviour "
        "weight exp(recomputed - engine)), tis (verl: times min(exp(recomputed - engine), tis_cap)).")
    behav_imp_weight_cap: float | None = Field(None, gt=1, description="decoupled: tokens whose behaviour weight "
                                               "exceeds this are left out of the loss (AReaL; null: no cap).")
    tis_cap: float = Field(2.0, gt=0, description="tis: truncation C of the importance weight (verl's default 2).")
    tis_level: Literal["token", "sequence"] = Field("token", description="tis: one weight per token, or per "
                                                    "sequence from the summed log-ratio.")

    @model_validator(mode="after")
    def _off_policy_options(self) -> "AlgorithmConfig":
        """A cap set without the decoupled loss would silently do nothing (AReaL requires the pair too)."""
        if self.behav_imp_weight_cap is not None and self.off_policy != "decoupled":
            raise ValueError(f"behav_imp_weight_cap needs off_policy=decoupled (off_policy is {self.off_policy!r})")
        return self
