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
    "delta": "algorithm.clip_ratio_c", "loss_type": "algorithm.loss_agg_mode", "scale_rewards": "algorithm.adv_estimator",
    "importance_sampling_level": "algorithm.policy_loss",
    "vllm_importance_sampling_correction": "algorithm.rollout_correction",
    "output_dir": "trainer.output_dir",
}


def alias_for(key: str) -> str | None:
    """memrl's key for ``key`` given under another library's name: the whole dotted key (``model.name``) or
    its last part (``trainer.learning_rate``, ``--lr``); None when it is no such name."""
    return ALIASES.get(key) or ALIASES.get(key.rsplit(".", 1)[-1])
