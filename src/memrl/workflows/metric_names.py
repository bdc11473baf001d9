"""The metric names a workflow may not use for its own (``ep.metric``), because the trainer writes them."""

from __future__ import annotations

# Keys of metrics.jsonl the trainer (or the episode record) writes: an ep.metric of the same name would replace
# them (docs/reference/metrics.md lists them all).
TRAINER_METRICS = frozenset((
    "step", "reward", "reward_finished", "num_conversations", "response_tokens", "rollout_episodes",
    "failed_episodes", "prompt_too_long", "dropped_groups", "gen_rounds", "tokens_per_s", "pg_loss", "clipfrac",
    "clipfrac_lower", "ppo_kl", "kl", "entropy", "grad_norm", "lr", "skipped_updates", "logprob_mismatch",
    "train_rows", "train_tokens", "data_position", "idle_steps", "gpu_peak_gib", "kept_groups", "merge_missed",
    "score", "overlong_reward", "overlong", "masked_truncated", "baseline_reward", "baseline_failed",
    "baseline_score"))
TRAINER_PREFIXES = ("eval/", "time/", "rollout_corr/", "distill/", "async/", "variance_proxy/")
