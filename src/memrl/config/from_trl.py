"""Translate a TRL GRPO run (``GRPOConfig`` fields) into a memrl config (``memrl config from-trl``).

Why: TRL users arrive with a ``grpo.yaml`` or a long ``accelerate launch train.py --... `` line, and TRL's defaults
are not memrl's (verl's): TRL has no dual clip (``delta=None``), adds 1e-4 to the group std, averages ``dapo``'s
loss over tokens, and counts ``max_steps`` in optimizer steps of ``per_device_train_batch_size`` completions per
process. This module writes every setting TRL's run uses, TRL's defaults filling what the file leaves out, so
running the translated config is running TRL's algorithm (``docs/guides/from-trl.md`` has the mapping and where
the numbers still differ), and says for every field it does not translate why not.

TRL's defaults are ``GRPOConfig``'s at f2cd577 (``trl/trainer/grpo_config.py``) and the ``TrainingArguments`` /
``ModelConfig`` defaults it keeps. The task itself (dataset, reward functions, prompt budgets) is a memrl workflow.
"""

from __future__ import annotations

from typing import Any

from memrl.config.aliases import note_for
from memrl.config.field_typos import trl_typo
from memrl.config.from_verl import _valid
from memrl.config.trl_batches import batches_rule
from memrl.config.trl_model import differences_rule, dtype_rule, grad_clip_rule, peft_rule, vllm_rule
from memrl.config.verl_script import Translation

DEFAULT = "TRL's default"
HEADER = "# translated by memrl config from-trl; values marked 'TRL's default' are GRPOConfig's (TRL f2cd577)"
TRL_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-6, "num_generations": 8, "max_completion_length": 512, "temperature": 1.0, "top_p": 1.0,
    "top_k": 0, "beta": 0.0, "num_iterations": 1, "epsilon": 0.2, "epsilon_high": None, "delta": None,
    "loss_type": "dapo", "scale_rewards": "group", "importance_sampling_level": "token",
    "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05, "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0,
    "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0, "mask_truncated_completions": False, "top_entropy_quantile": 1.0,
    "entropy_coef": 0.0, "use_adaptive_entropy": False, "entropy_target": 0.2, "entropy_coef_delta": 0.005,
    "entropy_coef_min": 0.0, "entropy_coef_max": 1.0, "off_policy_mask_threshold": None,
    "use_bias_correction_kl": False, "use_vllm": False, "vllm_mode": "colocate",
    "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_max": 3.0, "vllm_importance_sampling_clip_min": None,
    "vllm_importance_sampling_cap": None, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
    "steps_per_generation": None, "generation_batch_size": None, "max_steps": -1, "save_steps": 500,
    "save_strategy": "steps", "weight_decay": 0.0, "max_grad_norm": 1.0, "seed": 42, "lr_scheduler_type": "linear",
    "warmup_steps": 0, "warmup_ratio": 0.0, "gradient_checkpointing": True, "use_peft": False, "lora_r": 16,
    "lora_alpha": 32, "lora_dropout": 0.05, "lora_target_modules": None, "multi_objective_aggregation":
    "sum_then_normalize", "sync_ref_model": False, "ref_model_sync_steps": 512, "ref_model_mixup_alpha": 0.6,
}
SIMPLE: list[tuple[str, str, Any]] = [  # (TRL field, memrl key, conversion), written whenever TRL has a value
    ("num_generations", "algorithm.n", int), ("learning_rate", "trainer.lr", float),
    ("weight_decay", "trainer.weight_decay", float),
    ("seed", "trainer.seed", int), ("temperature", "sampling.temperature", float),
    ("top_p", "sampling.top_p", float), ("top_k", "sampling.top_k", lambda v: max(int(v or 0), 0)),
    ("model_name_or_path", "model.path", str), ("gradient_checkpointing", "trainer.gradient_checkpointing", bool),
    ("save_total_limit", "trainer.keep_checkpoints", int), ("output_dir", "trainer.output_dir", str),
    ("num_iterations", "algorithm.ppo_epochs", int), ("top_entropy_quantile", "algorithm.top_entropy_quantile", float),
    ("mask_truncated_completions", "algorithm.mask_truncated_completions", bool),
    ("off_policy_mask_threshold", "algorithm.off_policy_mask_threshold", float),
    ("entropy_coef", "algorithm.entropy_coef", float),
]
# written only when TRL reads them: (field, memrl key, conversion, the condition's field and value)
ONLY_WITH: list[tuple[str, str, Any, str, Any]] = [
    *((f, f"algorithm.{f}", float, "use_adaptive_entropy", True)
      for f in ("entropy_target", "entropy_coef_delta", "entropy_coef_min", "entropy_coef_max")),
    ("use_adaptive_entropy", "algorithm.adaptive_entropy", bool, "use_adaptive_entropy", True),
    *((f, f"algorithm.{f}", float, "loss_type", "vespo") for f in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
                                                                    "vespo_lambda_neg")),
    ("sapo_temperature_pos", "algorithm.sapo_tau_pos", float, "loss_type", "sapo"),
    ("sapo_temperature_neg", "algorithm.sapo_tau_neg", float, "loss_type", "sapo"),
    ("use_bias_correction_kl", "algorithm.kl_bias_correction", bool, "use_bias_correction_kl", True),
    ("ref_model_sync_steps", "algorithm.ref_sync_every", int, "sync_ref_model", True),
    ("ref_model_mixup_alpha", "algorithm.ref_mixup_alpha", float, "sync_ref_model", True),
]
AGGREGATION = {"dapo": "token-mean", "bnpo": "token-mean", "grpo": "seq-mean-token-mean",
               "dr_grpo": "seq-mean-token-sum-norm"}
OWN_LOSSES = ("cispo", "sapo", "luspo", "vespo")
PLUMBING = ("per_device_eval_batch_size", "dataloader_", "ddp_", "deepspeed", "fsdp", "vllm_gpu_memory",
            "vllm_tensor_parallel", "vllm_server_", "vllm_group_port", "vllm_enable_sleep", "vllm_model_impl",
            "vllm_max_model_length", "ds3_gather", "torch_compile", "bf16", "fp16", "tf32", "attn_implementation",
            "gradient_checkpointing_kwargs", "cast_lm_head", "use_transformers_",
            "cache_implementation", "model_init_kwargs", "trust_remote_code", "use_cpu", "pad_to_multiple_of",
            "parallelism_config", "config_file", "accelerate_config",
            "multi_gpu", "mixed_precision", "num_machines", "machine_rank",
            "main_process", "rdzv", "master_")
BOOKKEEPING = ("logging_", "log_", "report_to", "run_name", "push_to_hub", "hub_", "save_strategy", "eval_",
               "do_eval", "num_completions_to_print", "save_only_model", "resume_from_checkpoint",
               "overwrite_output_dir", "config", "wandb_")
TASK = ("dataset_", "reward_funcs", "max_prompt_length", "chat_template", "remove_unused_columns", "shuffle_dataset",
        "num_generations_eval", "max_tool_calling_iterations")


def translate_trl(fields: dict[str, Any], processes: int | None = None) -> Translation:
    """memrl settings for a TRL run's fields (``processes``: how many it trains on, TRL's batch sizes being per
    process; None: unknown, 1 assumed and said), TRL's defaults filling in what the fields leave out."""
    out = Translation()
    if processes is None:
        processes = 1
        launcher = fields.get("config_file", fields.get("accelerate_config"))
        unread = f"; {launcher} was not found or holds no num_processes" if isinstance(launcher, str) else ""
        out.skipped["(processes)"] = ("batch sizes assume 1 process: pass --processes N with the TRL run's count "
                                      f"(its accelerate config's num_processes{unread})")

    def get(key: str) -> Any:
        out.used.add(key)
        return fields.get(key, TRL_DEFAULTS.get(key))

    def source(*keys: str) -> str:
        named = [k for k in keys if k in fields]
        return ", ".join(f"{k}={fields[k]}" for k in named) if named else DEFAULT

    for trl_key, key, cast in SIMPLE:
        value = get(trl_key)
        try:
            if value is not None:
                out.set(key, cast(value), source(trl_key))
        except (TypeError, ValueError):
            out.skipped[trl_key] = f"{value!r} is not a value memrl can read (a variable the script sets elsewhere?)"
    for trl_key, key, cast, when, equal in ONLY_WITH:
        value = get(trl_key)
        if get(when) == equal and value is not None:
            out.set(key, cast(value), source(trl_key))
        elif trl_key in fields and trl_key != when:
            out.skipped[trl_key] = f"TRL reads it only with {when}={equal}"
    for rule in RULES:
        before = set(out.used)
        try:
            rule(get, out, fields, source, processes)
        except (TypeError, ValueError, ZeroDivisionError) as err:  # a value memrl cannot read ($VAR left as written)
            read = sorted((out.used - before) & set(fields)) or [f"({rule.__name__.strip('_')})"]
            for key in read:  # the run's own fields the rule read: listed as left out, and why
                out.skipped[key] = f"not translated: {err} (a variable the script sets elsewhere?)"
    for key in fields:
        if key not in out.used:
            out.skipped[key] = why_skipped(key)
    return _valid(out, DEFAULT)


def _policy(out: Translation) -> str:
    return str(out.settings.get("algorithm.policy_loss", ("vanilla", ""))[0])


def _loss(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """loss_type (and importance_sampling_level) -> the policy loss and its aggregation."""
    kind, level = get("loss_type"), get("importance_sampling_level")
    where = source("loss_type", "importance_sampling_level")
    if level == "sequence" and kind in ("grpo", "luspo"):
        out.set("algorithm.policy_loss", "gspo" if kind == "grpo" else "luspo", where)
        return
    if kind == "luspo":  # TRL warns: its token-level luspo averages over every position, padding included
        out.skipped["importance_sampling_level"] = ("luspo at token level (TRL warns against it) averages over "
                                                    "padding too; memrl's luspo is the sequence-level one")
    if level == "sequence" and kind != "vespo":
        out.skipped["importance_sampling_level"] = (f"sequence-level ratios with loss_type={kind}: memrl has them "
                                                    "with grpo (policy_loss=gspo) and luspo only; token level here")
    if kind in AGGREGATION:
        out.set("algorithm.loss_agg_mode", AGGREGATION[kind], source("loss_type"))
        if kind == "dr_grpo":
            out.set("algorithm.loss_scale_factor", int(get("max_completion_length")), source("max_completion_length"))
    elif kind in OWN_LOSSES:
        out.set("algorithm.policy_loss", kind, source("loss_type"))
    else:
        out.skipped["loss_type"] = f"{kind!r} is not a TRL loss_type memrl knows"


def _clip(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """epsilon / epsilon_high / delta -> the clip range and the dual clip, for a loss that reads them."""
    from memrl.config.registry import POLICY_LOSSES

    chosen = POLICY_LOSSES.get(_policy(out))
    low, high = float(get("epsilon")), get("epsilon_high")
    high = low if high is None else float(high)
    where = source("epsilon", "epsilon_high")
    if _policy(out) == "cispo":  # TRL's cispo clamps the ratio at epsilon_high, with no lower bound
        if high >= 1:
            out.set("algorithm.clip_ratio_low", 1.0, where)
            out.set("algorithm.clip_ratio_high", high - 1.0, where)
        else:
            out.skipped["epsilon_high"] = (f"cispo clamps the ratio at epsilon_high={high:g}, below 1: memrl's cispo "
                                           "caps it at 1 + clip_ratio_high (>= 1); set epsilon_high >= 1")
    elif chosen.clip_range:
        out.set("algorithm.clip_ratio_low", low, source("epsilon"))
        out.set("algorithm.clip_ratio_high", high, where)
    else:
        for key in ("epsilon", "epsilon_high"):
            if key in given:
                out.skipped[key] = f"TRL's {_policy(out)} has no clip"
    delta = get("delta")
    if not chosen.dual_clip:
        if delta is not None:
            unread = _policy(out) in ("cispo", "sapo", "vespo")  # TRL's own branch for these never reads delta
            out.skipped["delta"] = (f"TRL's {_policy(out)} does not read it" if unread
                                    else f"memrl's {_policy(out)} has no bound on the ratio (TRL's two-sided clip)")
    elif delta is None:
        out.set("algorithm.clip_ratio_c", 1e9, f"{source('delta')} (delta=None: no bound on negative advantages)")
    elif float(delta) > 1 + high:
        out.set("algorithm.clip_ratio_c", float(delta), source("delta"))
    elif float(delta) > 1 and chosen.clip_range:
        # TRL clamps the ratio at delta before its min: positive advantages are then clipped at delta, not at
        # 1 + epsilon_high, and negative ones flatten at 1 + epsilon_high (a dual clip there): the same loss
        where = f"{source('delta', 'epsilon_high')} (delta at or below 1 + epsilon_high)"
        out.set("algorithm.clip_ratio_high", round(float(delta) - 1.0, 12), where)
        out.set("algorithm.clip_ratio_c", 1.0 + high, where)
    else:
        out.skipped["delta"] = f"delta={delta} at or below 1: TRL's clamp then cuts the ratio below 1"


def _kl(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    beta = float(get("beta"))
    out.set("algorithm.kl_coef", beta, source("beta"))
    if beta > 0:
        out.set("algorithm.kl_estimator", "low_var_kl", f"{source('beta')} (TRL's k3)")
    else:
        if out.settings.pop("algorithm.kl_bias_correction", None):
            out.skipped["use_bias_correction_kl"] = "TRL computes no KL with beta=0: nothing to weigh"
        if out.settings.pop("algorithm.ref_sync_every", None):
            out.settings.pop("algorithm.ref_mixup_alpha", None)
            out.skipped["sync_ref_model"] = "TRL refuses it with beta=0 (no reference to sync)"


def _advantages(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    scale = {True: "group", False: "none"}.get(get("scale_rewards"), get("scale_rewards"))
    if scale == "group":
        out.set("algorithm.adv_estimator", "grpo", source("scale_rewards"))
        out.set("algorithm.epsilon", 1e-4, f"{source('scale_rewards')} (TRL adds 1e-4 to the group std)")
    elif scale == "batch":  # TRL's std of the generation batch: memrl's step of prompts_per_step x n episodes
        out.set("algorithm.adv_estimator", "grpo_batch_std", source("scale_rewards"))
        out.set("algorithm.epsilon", 1e-4, f"{source('scale_rewards')} (TRL adds 1e-4 to the batch std)")
    elif scale == "none":
        out.set("algorithm.adv_estimator", "dr_grpo", source("scale_rewards"))
    else:
        out.skipped["scale_rewards"] = f"{scale!r}: TRL refuses it (batch, group or none)"
    if get("multi_objective_aggregation") != "sum_then_normalize":
        out.skipped["multi_objective_aggregation"] = (
            "TRL's GDPO: algorithm.adv_estimator=normalize_then_sum with gdpo_reward_keys naming the episode metrics "
            "your workflow logs for each reward function, gdpo_reward_weights for reward_weights, and "
            "algorithm.epsilon=1e-4 (TRL's, in both normalisations)")


def _schedule(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    kind = get("lr_scheduler_type")
    if kind in ("constant", "constant_with_warmup", "cosine"):
        out.set("trainer.lr_schedule", "cosine" if kind == "cosine" else "constant", source("lr_scheduler_type"))
    else:
        out.skipped["lr_scheduler_type" if "lr_scheduler_type" in given else "lr_scheduler_type (TRL's default)"] = (
            f"{kind!r} decay: memrl's trainer.lr_schedule is constant (kept) or cosine")


def _masks_fit(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """TRL multiplies any loss by its entropy and off-policy masks; memrl zeroes advantages, which is the same only
    for some losses: the others are left out with the reason rather than refused when the config loads."""
    from memrl.config.registry import POLICY_LOSSES

    chosen = POLICY_LOSSES.get(_policy(out))
    if out.settings.get("algorithm.top_entropy_quantile", (1.0,))[0] < 1.0 and not chosen.token_linear:
        out.settings.pop("algorithm.top_entropy_quantile")
        out.skipped["top_entropy_quantile"] = (f"TRL's entropy mask over {_policy(out)}'s one ratio per row spreads "
                                               "a masked token's gradient: memrl has no setting for it")
    if chosen.token_weights_only and out.settings.get("algorithm.rollout_correction.rollout_is", (None,))[0] == \
            "sequence":
        out.settings.pop("algorithm.rollout_correction.rollout_is")
        out.settings.pop("algorithm.rollout_correction.rollout_is_threshold", None)
        out.skipped["vllm_importance_sampling_mode"] = (f"a sequence mode with {_policy(out)}: TRL refuses the pair "
                                                        "too (use token_truncate or token_mask)")
    if out.settings.get("algorithm.off_policy_mask_threshold", (None,))[0] is not None and not chosen.zeroes_rows:
        out.settings.pop("algorithm.off_policy_mask_threshold")
        out.skipped["off_policy_mask_threshold"] = f"memrl's mask does not fit {_policy(out)}"


def why_skipped(key: str) -> str:
    """Why a TRL field has no memrl setting here."""
    note = note_for(key)
    if note:
        return note
    if key == "disable_dropout":
        return "memrl trains with the model's own dropout settings: no counterpart"
    if key.startswith(("optim", "adam_")):
        return "memrl's optimizer is AdamW with its own settings (trainer.lr, trainer.weight_decay): no counterpart"
    if key in ("bf16", "fp16", "tf32"):
        return "autocast over the weights' dtype in TRL: memrl computes in model.dtype (written above)"
    if key in ("repetition_penalty", "min_p", "generation_kwargs"):
        return "memrl samples with temperature, top_p and top_k only (sampling.*)"
    if any(key.startswith(p) or p in key for p in PLUMBING):
        return "placement, precision and memory: memrl sizes these itself"
    if any(key.startswith(p) for p in BOOKKEEPING):
        return "run bookkeeping memrl does its own way (trainer.*, memrl view)"
    if any(key.startswith(p) for p in TASK):
        return "the task (data, reward functions, budgets) is a memrl workflow's: workflow.* and data.train_file"
    return trl_typo(key) or "no memrl counterpart"


RULES = (_loss, _clip, _kl, _advantages, batches_rule, _schedule, vllm_rule, peft_rule, dtype_rule, grad_clip_rule,
         _masks_fit, differences_rule)
