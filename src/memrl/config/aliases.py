"""Other libraries' names for memrl settings (Hugging Face's Trainer, TRL, verl, OpenRLHF).

A newcomer types the name they know: ``trainer.learning_rate=1e-6`` was answered with the closest
spelling, ``trainer.mini_batches``, and ``model.name=...`` with ``workflow.name``; both point the
wrong way. A key (or its last part) found here is answered with memrl's key instead. Only names
that mean the same setting are listed: a hint that is wrong is worse than none.
"""

from __future__ import annotations

ALIASES: dict[str, str] = {
    # the learning rate
    "learning_rate": "trainer.lr", "lr": "trainer.lr", "optim.lr": "trainer.lr", "actor_lr": "trainer.lr",
    # the model to train
    "model": "model.path", "model.name": "model.path", "model_name": "model.path", "model_name_or_path": "model.path",
    "model_path": "model.path", "pretrain": "model.path", "tokenizer_name": "model.tokenizer",
    # episodes per prompt (the GRPO group)
    "num_generations": "algorithm.n", "rollout.n": "algorithm.n", "n_samples_per_prompt": "algorithm.n",
    "group_size": "algorithm.n",
    # how long to train, how often to save
    "steps": "trainer.total_steps", "max_steps": "trainer.total_steps", "total_training_steps": "trainer.total_steps",
    "num_train_steps": "trainer.total_steps", "save_steps": "trainer.save_every", "save_freq": "trainer.save_every",
    # prompts per step
    # (not TRL's per_device_train_batch_size: it counts completions, prompts x num_generations)
    "train_batch_size": "trainer.prompts_per_step", "rollout_batch_size": "trainer.prompts_per_step",
    # the update
    "max_grad_norm": "trainer.grad_clip", "weight_decay_rate": "trainer.weight_decay",
    "kl_loss_coef": "algorithm.kl_coef", "init_kl_coef": "algorithm.kl_coef", "beta": "algorithm.kl_coef",
    "entropy_coeff": "algorithm.entropy_coef", "ppo_epochs_per_step": "algorithm.ppo_epochs",
    # TRL's GRPOTrainer (docs/guides/from-trl.md maps their values)
    "epsilon_high": "algorithm.clip_ratio_high", "num_iterations": "algorithm.ppo_epochs",
    "delta": "algorithm.clip_ratio_c", "scale_rewards": "algorithm.adv_estimator",
    "importance_sampling_level": "algorithm.policy_loss",
    "vllm_importance_sampling_correction": "algorithm.rollout_correction",
    "vllm_importance_sampling_mode": "algorithm.rollout_correction.rollout_is",
    "vllm_importance_sampling_cap": "algorithm.rollout_correction.rollout_is_threshold",
    "vllm_importance_sampling_clip_max": "algorithm.rollout_correction.rollout_is_threshold",
    "vllm_importance_sampling_clip_min": "algorithm.rollout_correction.rollout_is_threshold",
    "steps_per_generation": "trainer.mini_batches", "temperature": "sampling.temperature",
    "mask_truncated_completions": "algorithm.mask_truncated_completions",
    "top_entropy_quantile": "algorithm.top_entropy_quantile",
    "off_policy_mask_threshold": "algorithm.off_policy_mask_threshold",
    "use_bias_correction_kl": "algorithm.kl_bias_correction",
    "ref_model_sync_steps": "algorithm.ref_sync_every", "ref_model_mixup_alpha": "algorithm.ref_mixup_alpha",
    "use_adaptive_entropy": "algorithm.adaptive_entropy", "entropy_target": "algorithm.entropy_target",
    "entropy_coef_delta": "algorithm.entropy_coef_delta", "entropy_coef_min": "algorithm.entropy_coef_min",
    "entropy_coef_max": "algorithm.entropy_coef_max",
    "vespo_k_pos": "algorithm.vespo_k_pos",
    "vespo_lambda_pos": "algorithm.vespo_lambda_pos",
    "vespo_k_neg": "algorithm.vespo_k_neg",
    "vespo_lambda_neg": "algorithm.vespo_lambda_neg",
    "output_dir": "trainer.output_dir",
}

# Other libraries' names that no one memrl key answers: what to set instead, or why there is nothing.
NOTES: dict[str, str] = {
    "loss_type": "TRL's loss_type is algorithm.loss_agg_mode for dapo / bnpo (token-mean), grpo "
                 "(seq-mean-token-mean) and dr_grpo (seq-mean-token-sum-norm), algorithm.policy_loss for cispo, "
                 "sapo, luspo and vespo (docs/guides/from-trl.md)",
    "max_completion_length": "the generation budget is the workflow's (memrl config show lists workflow.options); "
                             "dr_grpo's constant L is algorithm.loss_scale_factor",
    "max_prompt_length": "prompts are built by the workflow from its own token budgets (workflow.options)",
    "num_train_epochs": "memrl counts steps (a rollout and its update each): trainer.total_steps",
    "gradient_accumulation_steps": "memrl accumulates micro-batches of trainer.micro_batch_tokens tokens into "
                                   "each of trainer.mini_batches optimizer steps by itself",
    "multi_objective_aggregation": "normalize_then_sum is GDPO: algorithm.adv_estimator=gdpo with "
                                   "algorithm.gdpo_reward_keys naming each reward's episode metric",
    "reward_weights": "several rewards are combined by your reward function (docs/guides/custom-reward.md)",
    "use_vllm": "the engine is engine.kind (hf, openai, vllm)",
    "sync_ref_model": "set algorithm.ref_sync_every to the optimizer steps between reference updates (TRL's "
                      "ref_model_sync_steps, 512 by default)",
    "use_liger_kernel": "memrl has no Liger kernels",
}


def note_for(key: str) -> str | None:
    """What to do instead of setting ``key``, another library's name without one memrl key; None otherwise."""
    return NOTES.get(key) or NOTES.get(key.rsplit(".", 1)[-1])


# leaves that are TRL's names only bare or under algorithm./trainer. (env.judge.temperature is not sampling's)
_TRL_PLACES_ONLY = {"temperature"}


def alias_for(key: str) -> str | None:
    """memrl's key for ``key`` given under another library's name: the whole dotted key (``model.name``) or
    its last part (``trainer.learning_rate``, ``--lr``); None when it is no such name."""
    leaf = key.rsplit(".", 1)[-1]
    if leaf in _TRL_PLACES_ONLY and key != leaf and key.split(".", 1)[0] not in ("algorithm", "trainer"):
        return None
    return ALIASES.get(key) or ALIASES.get(leaf)
