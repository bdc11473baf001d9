"""Config of the RL algorithm (``algorithm.*``): advantage estimator, policy loss, KL, off-policy correction."""

from __future__ import annotations

import inspect
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from memrl.config.plugin_options import check_plugin_options
from memrl.config.rollout_corr import RolloutCorrectionConfig
from memrl.config.registry import (ADV_ESTIMATORS, KL_ESTIMATORS, LOSS_AGGREGATIONS, OFF_POLICY, POLICY_LOSSES,
                                   registered)
from memrl.config.section import Finite, Section

TisLevel = Literal["token", "sequence"]  # memrl.rl.offpolicy reads the same list
# The fields below that only some policy losses read (their ``options``; tests/rl/test_policy_losses_more.py keeps
# the two lists equal): set with another loss, they are refused.
# The keywords memrl passes to every policy loss / advantage estimator, with the key that sets each (a plug-in's
# own settings may not take these names).
LOSS_KEYWORDS = {"cliprange_low": "algorithm.clip_ratio_low", "cliprange_high": "algorithm.clip_ratio_high",
                 "clip_ratio_c": "algorithm.clip_ratio_c", "loss_agg_mode": "algorithm.loss_agg_mode",
                 "norm_length": "the workflow's token budget", "weights": "algorithm.rollout_correction"}
ESTIMATOR_KEYWORDS = {"epsilon": "algorithm.epsilon"}
LOSS_OPTION_FIELDS = ("sapo_tau_pos", "sapo_tau_neg", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
                      "kl_cov_coef", "dro_beta", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")


class AlgorithmConfig(Section):
    """Advantage estimator and PPO-style loss (verl semantics; MemAgent's settings noted)."""

    adv_estimator: registered(ADV_ESTIMATORS) = Field(
        "grpo", description="Advantage estimator: a registered name (memrl.rl.register_adv_est) or an import path "
        "'package.module:function'.")
    n: int = Field(8, ge=1, description="Episodes per prompt (the GRPO group); MemAgent uses 16.")
    epsilon: Finite = Field(1e-6, gt=0, description="Added to the group std (grpo; TRL adds 1e-4), at most 0.01. "
                            "TRL's epsilon, the clip range, is clip_ratio_low / clip_ratio_high here.")
    gdpo_reward_keys: list[str] = Field(
        default_factory=list, description="gdpo and normalize_then_sum (TRL's GDPO): the episode metrics that are "
        "the reward components (a workflow's "
        "ep.metric names, or the QA workflows' em / sub_em / f1; verl's algorithm.gdpo_reward_keys), each "
        "normalised in its group on its own before the weighted sum.")
    gdpo_reward_weights: list[Finite] | None = Field(
        None, description="gdpo and normalize_then_sum: one weight per gdpo_reward_keys entry (verl's "
        "gdpo_reward_weights, TRL's reward_weights); null: 1 each.")
    gamma: float = Field(1.0, ge=0, le=1, description="Discount: per token for reinforce_plus_plus, per turn "
                         "(conversation) for gigpo and step_reinforce (ROLL's step_reward_gamma, 0.95 in its examples).")
    episode_weight: Finite = Field(1.0, ge=0, description="gigpo: weight of the episode score normalised in its "
                                  "prompt group (ROLL's episode_reward_weight).")
    step_weight: Finite = Field(1.0, ge=0, description="gigpo: weight of the turn's discounted return normalised "
                               "among the group's turns with the same anchor state (ROLL's step_reward_weight).")
    turn_norm: Literal["mean_std", "mean"] = Field(
        "mean_std", description="gigpo and step_reinforce: how scores and returns are normalised in their groups: "
        "mean_std = (x - mean) / (std + 1e-6) (verl-agent's gigpo.mode=mean_std_norm, as its examples; ROLL's "
        "method mean_std), mean = x - mean (verl-agent's mean_norm, ROLL's mean).")
    state_similarity: float | None = Field(
        None, gt=0, lt=1, description="gigpo: turns of a prompt group whose anchor states match at least this "
        "difflib ratio share a step group (verl-agent's gigpo.enable_similarity with similarity_thresh; 0.9 in its "
        "search example); for states that are observation text. null: equal states only.")
    clip_ratio_low: float = Field(0.2, ge=0, description="PPO clips the ratio below at 1 - clip_ratio_low; 1 or "
                                  "more: no lower clip (CISPO recipes set 10).")
    clip_ratio_high: float = Field(0.2, ge=0, description="DAPO clip-higher uses 0.28.")
    clip_ratio_c: float = Field(3.0, gt=1, description="Dual-clip bound for negative advantages.")
    loss_agg_mode: registered(LOSS_AGGREGATIONS) = Field(
        "token-mean", description="How a [rows, tokens] loss becomes one number: a registered name "
        "(memrl.rl.register_loss_agg) or an import path.")
    loss_scale_factor: int | None = Field(
        None, ge=1, description="seq-mean-token-sum-norm's constant divisor L (verl's actor.loss_scale_factor); null: "
        "the workflow's longest response (norm_tokens), else the step's widest response span (all ranks).")
    kl_coef: Finite = Field(0.0, ge=0, description="KL loss weight; MemAgent uses 0.001.")
    kl_estimator: registered(KL_ESTIMATORS) = Field(
        "low_var_kl", description="Per-token KL estimate to the reference: a registered name "
        "(memrl.rl.register_kl) or an import path.")
    ref_sync_every: int | None = Field(
        None, ge=1, description="TR-DPO's reference update (TRL's sync_ref_model with ref_model_sync_steps): every "
        "this many optimizer steps the reference becomes ref_mixup_alpha x policy + (1 - ref_mixup_alpha) x "
        "reference, so the KL term holds the policy near where it recently was instead of where it started; the "
        "reference is saved with every checkpoint (a second copy of the weights: checkpoints about double). Needs kl_coef > 0 and full fine-tuning (TRL refuses LoRA). null: "
        "the reference stays the initial weights.")
    ref_mixup_alpha: float = Field(0.6, gt=0, le=1, description="ref_sync_every: the policy's share in each "
                                   "reference update (TRL's ref_model_mixup_alpha, 0.6).")
    kl_bias_correction: bool = Field(
        False, description="TRL's use_bias_correction_kl (DeepSeek-V3.2, arXiv 2512.02556): each token's KL "
        "estimate times the current/old importance ratio, gradient included, so the KL estimated on the old "
        "policy's samples is unbiased for the current one; the ratio is per row with gspo / luspo (TRL's "
        "sequence-level ratio). Needs kl_coef > 0.")
    entropy_coef: Finite = Field(0.0, ge=0, description="Weight of the entropy bonus (aggregated as the loss); "
                                 "with adaptive_entropy, its starting value.")
    adaptive_entropy: bool = Field(
        False, description="TRL's use_adaptive_entropy (Skywork-OR1's adaptive entropy control): the entropy bonus "
        "applies only in optimizer steps after one whose mean per-token entropy (over every rank, on the tokens "
        "the bonus acts on) was at most entropy_target, and entropy_coef moves by entropy_coef_delta after every "
        "optimizer step: up while the entropy is at most the target, down once above, within [entropy_coef_min, "
        "entropy_coef_max]. Logged as entropy_coef; saved with checkpoints.")
    entropy_target: Finite = Field(0.2, ge=0, description="adaptive_entropy: the target mean per-token entropy in "
                                   "nats (TRL's default 0.2 acts only near collapse: set it near the entropy "
                                   "logged early in training).")
    entropy_coef_delta: Finite = Field(0.005, ge=0, description="adaptive_entropy: the coefficient's step.")
    entropy_coef_min: Finite = Field(0.0, ge=0, description="adaptive_entropy: the coefficient's floor.")
    entropy_coef_max: Finite = Field(1.0, ge=0, description="adaptive_entropy: the coefficient's ceiling.")
    ppo_epochs: int = Field(1, ge=1)
    dynamic_sampling: bool = Field(False, description="DAPO: drop groups whose rewards are all equal, refill.")
    dynamic_sampling_max_mean: Finite | None = Field(
        None, description="Dynamic sampling keeps a group when its mean reward is at most this instead (AReaL's "
        "tau2 group_filter, mean <= 0.95: it drops only solved groups and keeps all-failed ones, which carry "
        "negative advantages under batch whitening); the mean is over the group's conversations, as AReaL "
        "averages over its model calls. Read only with algorithm.dynamic_sampling=true.")
    max_gen_batches: int = Field(4, ge=0, description="Dynamic sampling: rollout rounds per step; a step that "
                                 "still has fewer than prompts_per_step groups trains on those it has, with a warning "
                                 "(verl raises there). 0: no limit (verl's max_num_gen_batches 0, its DAPO default).")
    dynamic_sampling_prompts: int | None = Field(
        None, ge=1, description="Dynamic sampling: prompts drawn in every round, and the first prompts_per_step "
        "kept groups in draw order train (verl's data.gen_batch_size, 3 x train_batch_size in its DAPO scripts; the "
        "surplus is not trained on). null: each round draws only the groups still missing. Synchronous runs.")
    dynamic_sampling_metric: Literal["reward", "score"] = Field(
        "reward", description="What dynamic sampling compares within a group: reward (what trains, verl's "
        "filter_groups.metric seq_reward) or score (the reward before overlong shaping, verl's acc / score, "
        "which its DAPO scripts use).")
    overlong_buffer: int | None = Field(
        None, ge=1, description="DAPO's soft overlong punishment (verl's overlong_buffer.len): an episode whose last "
        "conversation (verl reads a multi-sequence sample's last) holds more than overlong_max_tokens - "
        "overlong_buffer response tokens (as verl counts them: everything after the first prompt, tool results and "
        "the end token included) gets -(excess / buffer) x overlong_penalty_factor added to its reward; null: off.")
    overlong_penalty_factor: Finite = Field(1.0, ge=0, description="DAPO's overlong_buffer.penalty_factor.")
    overlong_max_tokens: int | None = Field(
        None, ge=1, description="The response budget the overlong buffer ends at (verl's max_resp_len, its "
        "data.max_response_length); required with overlong_buffer.")
    top_entropy_quantile: float = Field(
        1.0, ge=0, le=1, description="TRL's top_entropy_quantile (Beyond the 80/20 Rule, arXiv 2506.01939; 0.2 "
        "recommended): only the tokens whose entropy is in this top share of the micro-batch's response tokens "
        "carry the policy loss and the entropy bonus; the others add 0 but still count in the loss's "
        "normaliser, as TRL's. 1.0: every token. The threshold is the quantile of the tokens of every rank's "
        "current micro-batch together, as TRL gathers its processes' (DDP ranks then run as many micro-batch "
        "passes, as FSDP's do); clipfrac counts a masked token as unclipped. Needs off_policy none and a policy loss "
        "whose tokens add 0, gradient included, at advantage 0 (vanilla, cispo, sapo, gpg, dppo_tv, dppo_kl; "
        "not gspo, whose one ratio per row TRL's mask leaves spreading a masked token's gradient).")
    variance_proxy: bool = Field(
        False, description="verl's actor.calculate_sum_pi_squared: the log-prob pass before the update also computes "
        "each generated token's sum pi^2, and each step logs verl's gradient-variance proxies (variance_proxy/*) for "
        "any estimator. Costs that no-grad pass where the update would otherwise reuse its own log-probs (one "
        "mini-batch, one epoch, no correction). Always on with optimal_token_baseline, which reads sum pi^2.")
    mask_truncated_completions: bool = Field(
        False, description="TRL's mask_truncated_completions (DAPO's advice): a conversation whose last model turn "
        "ran out of tokens (finish reason length: cut at its max_new_tokens, not ended by a stop token) is left out "
        "of the loss: its tokens are masked, it still counts as a sequence where the loss averages per sequence "
        "(as TRL's masked completions do), and its episode's reward still counts in its group's advantages. "
        "Logged as masked_truncated, the share of the step's trained conversations masked.")
    off_policy_mask_threshold: Finite | None = Field(
        None, ge=0, description="TRL's off_policy_mask_threshold, the off-policy sequence mask of DeepSeek-V3.2 "
        "(arXiv 2512.02556, Eq. 9; e.g. 0.5): a conversation whose advantage is negative and whose mean per-token "
        "KL from the engine that sampled it (log p_engine - log p, per micro-batch) exceeds this adds nothing to "
        "the policy loss (it still counts in the normaliser; KL and entropy terms untouched). Logged as "
        "off_policy_masked, the share of trained tokens dropped. null: off. Needs off_policy none and a policy "
        "loss where a row with zero advantages adds 0 (all but geo_mean, clip_cov, kl_cov, dro).")
    step_rewards: bool = Field(False, description="ReMemR1: mix per-turn state advantages (workflow.state_reward_alpha).")
    policy_loss: registered(POLICY_LOSSES) = Field(
        "vanilla", description="The policy-gradient loss, verl's policy_loss.loss_mode: vanilla (token-level PPO "
        "clip), gspo (one clipped ratio per sequence; verl's GSPO recipe clips at 3e-4/4e-4), cispo (clipped, "
        "stop-gradient ratio times A log pi), sapo (a smooth gate instead of the clip), geo_mean (GMPO: geometric "
        "mean of the clipped token ratios), gpg (REINFORCE), dppo_tv / dppo_kl (drop tokens whose probability "
        "moved more than clip_ratio_low/high in total variation / binary KL), dro (log-ratio penalty dro_beta), "
        "clip_cov / kl_cov (restrain the tokens with the largest log-prob/advantage covariance), TRL's luspo "
        "(GSPO, each row's loss times its length) and vespo (-phi(w) A log pi, phi a smooth function of the "
        "sequence's importance weight w; vespo_* keys); gspo, sapo and geo_mean aggregate per sequence, so "
        "loss_agg_mode becomes seq-mean-token-mean, luspo seq-mean-token-sum. Or a name registered with "
        "memrl.rl.register_policy_loss, or an import path.")
    sapo_tau_pos: Finite = Field(1.0, gt=0, description="sapo: gate temperature where the advantage is positive "
                                "(verl's tau_pos).")
    sapo_tau_neg: Finite = Field(1.05, gt=0, description="sapo: gate temperature where it is not (verl's tau_neg).")
    clip_cov_ratio: float = Field(0.0002, gt=0, le=1, description="clip_cov: share of trained tokens whose "
                                  "gradient is dropped (at least one).")
    clip_cov_lb: float = Field(1.0, description="clip_cov: only tokens with covariance above this are dropped.")
    clip_cov_ub: float = Field(5.0, description="clip_cov: ... and below this.")
    kl_cov_ratio: float = Field(0.0002, gt=0, le=1, description="kl_cov: share of trained tokens (the largest "
                                "covariance, at least one) given the |log ratio| penalty.")
    kl_cov_coef: Finite = Field(0.1, ge=0, description="kl_cov: weight of that penalty (verl's ppo_kl_coef).")
    dro_beta: Finite | None = Field(None, gt=0, description="dro: weight of the quadratic log-ratio penalty; "
                                   "required with policy_loss=dro (no default, as in verl).")
    vespo_k_pos: Finite = Field(2.0, ge=0, description="vespo: exponent k of phi(w) = e^lambda w^k e^(-lambda w) "
                                "where the advantage is >= 0 (TRL's vespo_k_pos): how fast phi falls for w < 1.")
    vespo_lambda_pos: Finite = Field(3.0, ge=0, description="vespo: decay lambda there (TRL's vespo_lambda_pos): "
                                     "how fast phi falls for w > 1.")
    vespo_k_neg: Finite = Field(3.0, ge=0, description="vespo: k where the advantage is negative (TRL's "
                                "vespo_k_neg).")
    vespo_lambda_neg: Finite = Field(2.0, ge=0, description="vespo: lambda where the advantage is negative "
                                     "(TRL's vespo_lambda_neg).")
    policy_loss_options: dict[str, Any] = Field(
        default_factory=dict, description="A plug-in policy loss's own settings, passed to it as keyword "
        "arguments (policy_loss=my_pkg.losses:scaled with policy_loss_options={scale: 0.5}); checked against its "
        "signature when the config loads. Built-in losses read theirs from the keys above.")
    adv_estimator_options: dict[str, Any] = Field(
        default_factory=dict, description="A plug-in advantage estimator's own settings, passed to it as keyword "
        "arguments beside epsilon; checked against its signature when the config loads.")
    off_policy: registered(OFF_POLICY) = Field(
        "none", description="Policy loss and its correction for samples the engine drew under other weights: a "
        "registered name (memrl.rl.register_off_policy) or an import path.")
    behav_imp_weight_cap: float | None = Field(None, gt=1, description="decoupled: tokens whose behaviour weight "
                                               "exceeds this are left out of the loss (AReaL; null: no cap).")
    tis_cap: float = Field(2.0, gt=0, description="tis: truncation C of the importance weight (verl's default 2).")
    tis_level: TisLevel = Field("token", description="tis: one weight per token, or per "
                                                    "sequence from the summed log-ratio.")
    rollout_correction: RolloutCorrectionConfig = Field(
        default_factory=RolloutCorrectionConfig, description="verl 0.9's rollout correction (importance weights, "
        "rejection, bypass) on the trainer/engine log-ratio; see the guide 'Engine and trainer disagree'.")

    @field_validator("epsilon")
    @classmethod
    def _std_epsilon(cls, value: float) -> float:
        """A clip range given here (TRL's ``epsilon=0.2``) would silently shrink every advantage."""
        if value > 0.01:
            raise ValueError(f"{value:g} is added to the group's reward std (at most 0.01; TRL adds 1e-4): TRL's "
                             "epsilon, the clip range, is algorithm.clip_ratio_low / clip_ratio_high here")
        return value

    @model_validator(mode="after")
    def _off_policy_options(self) -> "AlgorithmConfig":
        """A cap set without a loss that reads it would silently do nothing (AReaL requires the pair too)."""
        option = "behav_imp_weight_cap"
        if self.behav_imp_weight_cap is not None and option not in _options_of(self.off_policy):
            readers = [n for n in OFF_POLICY.names if option in _options_of(n)]
            raise ValueError(f"{option} needs off_policy={' or '.join(readers)} (off_policy is {self.off_policy!r})")
        if self.step_rewards and getattr(ADV_ESTIMATORS.get(self.adv_estimator), "turns", None) is not None:
            raise ValueError(f"step_rewards (ReMemR1's state advantages) and adv_estimator={self.adv_estimator!r} "
                             "both give each turn its own advantage: use one")
        if self.mask_truncated_completions and getattr(ADV_ESTIMATORS.get(self.adv_estimator), "policy_stats", False):
            raise ValueError(f"mask_truncated_completions masks a truncated conversation after scoring, so "
                             f"adv_estimator={self.adv_estimator!r}'s baseline per token would lose its tokens (and "
                             "its episode's return) from the group: use one or the other")
        if self.step_rewards and not getattr(ADV_ESTIMATORS.get(self.adv_estimator), "spreads", True):
            raise ValueError(f"step_rewards mixes per-row values, which would skip adv_estimator="
                             f"{self.adv_estimator!r}'s own token stage (whitening or discounting over the batch, "
                             "or a baseline per token): "
                             "use grpo, dr_grpo, rloo or another estimator that gives each row one value")
        if self.state_similarity is not None and not _reads_similarity(self.adv_estimator):
            readers = [n for n in ADV_ESTIMATORS.names if _reads_similarity(n)]
            raise ValueError(f"state_similarity is read by adv_estimator={' or '.join(readers)} only "
                             f"(adv_estimator is {self.adv_estimator!r})")
        self._overlong()
        self._gdpo_keys()
        if self.rollout_correction.enabled and self.off_policy != "none":
            raise ValueError(f"rollout_correction and off_policy={self.off_policy!r} both correct the engine's "
                             "log-probs: use one (off_policy: none with rollout_correction, or no rollout_correction)")
        self._plugin_options()
        self._entropy_mask_fits()
        self._deepseek_fixes_fit()
        self._adaptive_entropy_fits()
        return self._policy_loss_fits()

    def _adaptive_entropy_fits(self) -> None:
        """The controller's settings do nothing without it; a floor above the ceiling has no meaning."""
        names = ("entropy_target", "entropy_coef_delta", "entropy_coef_min", "entropy_coef_max")
        if not self.adaptive_entropy:
            for name in self._changed(names):
                raise ValueError(f"{name} is read with adaptive_entropy=true only")
        if self.entropy_coef_min > self.entropy_coef_max:
            raise ValueError(f"entropy_coef_min {self.entropy_coef_min:g} is above entropy_coef_max "
                             f"{self.entropy_coef_max:g}")

    def _deepseek_fixes_fit(self) -> None:
        """The off-policy sequence mask drops rows by zeroing their advantages: exact only with losses where that
        removes the row; an importance-weighted KL with no KL term, or VESPO with sequence weights, would be
        silently something else."""
        if self.kl_bias_correction and self.kl_coef == 0:
            raise ValueError("kl_bias_correction weights the KL term to the reference: set kl_coef > 0")
        if self.ref_sync_every is not None and self.kl_coef == 0:
            raise ValueError("ref_sync_every updates the reference of the KL term: set kl_coef > 0 (TRL refuses "
                             "sync_ref_model with beta=0 too)")
        if self.ref_sync_every is None and self._changed(("ref_mixup_alpha",)):
            raise ValueError("ref_mixup_alpha is read with ref_sync_every only")
        if self.rollout_correction.rollout_is == "sequence" and self.replaces_ppo and \
                getattr(POLICY_LOSSES.get(self.policy_loss), "token_weights_only", False):  # (imports torch: last)
            raise ValueError(f"policy_loss={self.policy_loss!r} folds token importance weights into its sequence "
                             "weight (TRL allows its token modes only): use rollout_correction.rollout_is=token")
        if self.off_policy_mask_threshold is None:
            return
        if not getattr(POLICY_LOSSES.get(self.policy_loss), "zeroes_rows", False):
            readers = [n for n in POLICY_LOSSES.names if getattr(POLICY_LOSSES.get(n), "zeroes_rows", False)]
            raise ValueError(f"off_policy_mask_threshold needs a policy loss where a row with zero advantages adds "
                             f"0 ({', '.join(readers)}); policy_loss is {self.policy_loss!r}")
        if self.off_policy != type(self).model_fields["off_policy"].default:
            raise ValueError(f"off_policy_mask_threshold works with off_policy none (off_policy is "
                             f"{self.off_policy!r})")

    def _entropy_mask_fits(self) -> None:
        """top_entropy_quantile masks a token by zeroing its advantage: exact only where that zeroes its loss."""
        if self.top_entropy_quantile >= 1.0:
            return
        chosen = POLICY_LOSSES.get(self.policy_loss)
        if not getattr(chosen, "token_linear", False):
            readers = [n for n in POLICY_LOSSES.names if getattr(POLICY_LOSSES.get(n), "token_linear", False)]
            raise ValueError(f"top_entropy_quantile needs a policy loss whose tokens add 0 at advantage 0 "
                             f"({', '.join(readers)}); policy_loss is {self.policy_loss!r}")
        if self.off_policy != type(self).model_fields["off_policy"].default:
            raise ValueError(f"top_entropy_quantile works with off_policy none (off_policy is {self.off_policy!r})")

    def _gdpo_keys(self) -> None:
        """GDPO needs its components named (verl asserts); they mean nothing to another estimator."""
        if self.adv_estimator == type(self).model_fields["adv_estimator"].default and not self.gdpo_reward_keys \
                and self.gdpo_reward_weights is None:
            return  # (the registry imports torch: only when it can matter)
        reads = getattr(ADV_ESTIMATORS.get(self.adv_estimator), "components", False)
        if reads and not self.gdpo_reward_keys:
            raise ValueError(f"adv_estimator={self.adv_estimator!r} needs gdpo_reward_keys: the episode metrics it "
                             "normalises one by one (ep.metric names; em, f1 ... in the QA workflows)")
        for name in ("gdpo_reward_keys", "gdpo_reward_weights"):
            if getattr(self, name) and not reads:
                readers = [n for n in ADV_ESTIMATORS.names if getattr(ADV_ESTIMATORS.get(n), "components", False)]
                raise ValueError(f"{name} is read by adv_estimator={' or '.join(readers)} only (adv_estimator is "
                                 f"{self.adv_estimator!r})")
        if self.gdpo_reward_weights is not None and len(self.gdpo_reward_weights) != len(self.gdpo_reward_keys):
            raise ValueError(f"gdpo_reward_weights has {len(self.gdpo_reward_weights)} weights for "
                             f"{len(self.gdpo_reward_keys)} gdpo_reward_keys: give one each")

    def _overlong(self) -> None:
        """The overlong settings come as a pair, the buffer inside the budget (verl's assert)."""
        if (self.overlong_buffer is None) != (self.overlong_max_tokens is None):
            raise ValueError("overlong_buffer and overlong_max_tokens come together (DAPO's buffer ends at the "
                             "response budget): set both, or neither")
        if self.overlong_buffer is not None and self.overlong_buffer > self.overlong_max_tokens:
            raise ValueError(f"overlong_buffer {self.overlong_buffer} is longer than overlong_max_tokens "
                             f"{self.overlong_max_tokens}")
        if self.dynamic_sampling_prompts is not None and not self.dynamic_sampling:
            raise ValueError("dynamic_sampling_prompts is read with dynamic_sampling=true only")

    def _plugin_options(self) -> None:
        """A plug-in's own settings must be keywords it takes (else its first update would fail)."""
        if self.policy_loss_options:
            check_plugin_options("policy_loss_options", self.policy_loss, POLICY_LOSSES.get(self.policy_loss),
                                 self.policy_loss_options, LOSS_KEYWORDS, positional=4)
        if self.adv_estimator_options:
            check_plugin_options("adv_estimator_options", self.adv_estimator, ADV_ESTIMATORS.get(self.adv_estimator),
                                 self.adv_estimator_options, ESTIMATOR_KEYWORDS, positional=2)

    @property
    def replaces_ppo(self) -> bool:
        """Whether ``policy_loss`` is another loss than the default PPO surrogate (which off_policy kinds and the
        rollout correction's bypass mode build on)."""
        return self.policy_loss != type(self).model_fields["policy_loss"].default

    def _policy_loss_fits(self) -> "AlgorithmConfig":
        """Another policy loss replaces vanilla PPO where verl's would (off_policy none, the rollout correction's
        weighted mode); a loss with its own aggregation sets loss_agg_mode, and refuses a contradicting one."""
        if not self.replaces_ppo:
            if self._changed(LOSS_OPTION_FIELDS):  # (the registry imports torch: only if needed)
                self._policy_loss_options()
            return self
        if self.off_policy != "none" or self.rollout_correction.bypass_mode:
            where = "rollout_correction.bypass_mode" if self.rollout_correction.bypass_mode else \
                f"off_policy={self.off_policy!r}"
            raise ValueError(f"policy_loss={self.policy_loss!r} cannot be combined with {where}, which brings its "
                             "own loss; use off_policy=none (rollout_correction without bypass_mode weights it)")
        self._policy_loss_options()
        forced = getattr(POLICY_LOSSES.get(self.policy_loss), "aggregation", None)
        if forced and self.loss_agg_mode != forced:
            if "loss_agg_mode" in self.model_fields_set:
                raise ValueError(f"policy_loss={self.policy_loss!r} aggregates per sequence (always {forced}), "
                                 f"but loss_agg_mode={self.loss_agg_mode!r}: leave loss_agg_mode unset "
                                 f"or set it to {forced}")
            self.__dict__["loss_agg_mode"] = forced  # so entropy, KL and micro-batch weights aggregate alike
        return self

    def _policy_loss_options(self) -> None:
        """An option of another loss set to another value than its default would silently do nothing; a required
        one left unset would fail at the first update, after the first rollout."""
        chosen = POLICY_LOSSES.get(self.policy_loss)
        reads = set(getattr(chosen, "options", ()))
        for name in self._changed(tuple(self.model_fields_set - reads)):
            readers = [n for n in POLICY_LOSSES.names if name in getattr(POLICY_LOSSES.get(n), "options", ())]
            if readers:
                raise ValueError(f"{name} is read by policy_loss={' or '.join(readers)} only (policy_loss is "
                                 f"{self.policy_loss!r})")
        if not getattr(chosen, "dual_clip", True) and self._changed(("clip_ratio_c",)):
            readers = [n for n in POLICY_LOSSES.names if getattr(POLICY_LOSSES.get(n), "dual_clip", False)]
            raise ValueError(f"clip_ratio_c (the dual clip of negative advantages) is read by policy_loss="
                             f"{' or '.join(readers)} only (policy_loss is {self.policy_loss!r})")
        if not getattr(chosen, "clip_range", True):
            for name in self._changed(("clip_ratio_low", "clip_ratio_high")):
                readers = [n for n in POLICY_LOSSES.names if getattr(POLICY_LOSSES.get(n), "clip_range", True)]
                raise ValueError(f"{name} is read by policy_loss={' or '.join(readers)} only (policy_loss is "
                                 f"{self.policy_loss!r}, which has no clip)")
        for name in getattr(chosen, "required", ()):
            if getattr(self, name) is None:
                raise ValueError(f"policy_loss={self.policy_loss!r} needs {name} (no default, as in verl)")

    def _changed(self, names: tuple[str, ...]) -> list[str]:
        """Those of ``names`` given with another value than the default (a saved config repeats every default)."""
        fields = type(self).model_fields
        return sorted(n for n in names if n in self.model_fields_set and getattr(self, n) != fields[n].default)


def _options_of(off_policy: str) -> tuple[str, ...]:
    """The ``algorithm`` fields only the correction ``off_policy`` reads (none for a plain function)."""
    return tuple(getattr(OFF_POLICY.get(off_policy), "options", ()))


def _reads_similarity(estimator: str) -> bool:
    """Whether the estimator's per-turn stage takes ``similarity`` (``state_similarity``)."""
    turns = getattr(ADV_ESTIMATORS.get(estimator), "turns", None)
    return turns is not None and "similarity" in inspect.signature(turns).parameters
