""""Did you mean ...?" for a field of a TRL config or a verl override that neither system has.

Why: ``memrl config from-trl`` / ``from-verl`` list every setting they leave out with the reason. A misspelt field
(``learning_rat``, ``actor_rollout_ref.actor.kl_los_coef``) used to land under "no memrl counterpart", which reads
as "memrl lacks this" when the truth is "the run you are translating never had it: TRL's parser or Hydra
refuses it". Suggestions are offered only from names the original certainly has, and only when close, so a real
field the list does not know is never called a typo of another.

The TRL names are those of ``GRPOConfig``, ``ModelConfig``, ``ScriptArguments`` / ``GRPOScriptArguments`` and the
dataset-mixture arguments at TRL f2cd577, plus the installed ``transformers.TrainingArguments`` (which
``GRPOConfig`` extends). The verl names are the overrides memrl translates (verl 0.9's keys, ``VERL_DEFAULTS``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Iterable

TRL_OWN_FIELDS = frozenset("""
learning_rate model_init_kwargs trust_remote_code router_aux_loss_coef disable_dropout cast_lm_head_to_fp32
remove_unused_columns num_generations num_generations_eval max_completion_length ds3_gather_for_generation
shuffle_dataset pad_to_multiple_of generation_batch_size steps_per_generation temperature top_p top_k min_p
generation_kwargs chat_template_kwargs repetition_penalty cache_implementation use_vllm vllm_mode vllm_model_impl
vllm_enable_sleep_mode vllm_structured_outputs_regex vllm_server_base_url vllm_server_host vllm_server_port
vllm_server_timeout vllm_group_port vllm_gpu_memory_utilization vllm_max_model_length vllm_tensor_parallel_size beta
num_iterations epsilon delta epsilon_high sapo_temperature_neg sapo_temperature_pos vespo_k_pos vespo_lambda_pos
vespo_k_neg vespo_lambda_neg importance_sampling_level reward_weights multi_objective_aggregation scale_rewards
loss_type mask_truncated_completions sync_ref_model ref_model_mixup_alpha ref_model_sync_steps top_entropy_quantile
entropy_coef use_adaptive_entropy entropy_coef_min entropy_coef_max entropy_coef_delta entropy_target
max_tool_calling_iterations vllm_importance_sampling_correction vllm_importance_sampling_mode
vllm_importance_sampling_clip_max vllm_importance_sampling_clip_min vllm_importance_sampling_cap
off_policy_mask_threshold use_bias_correction_kl log_completions log_multimodal num_completions_to_print
log_unique_prompts log_completions_hub_repo use_transformers_continuous_batching
transformers_continuous_batching_config use_transformers_paged max_prompt_length
model_name_or_path model_revision dtype torch_dtype attn_implementation use_peft lora_r lora_alpha lora_dropout
lora_target_modules lora_target_parameters lora_modules_to_save lora_task_type use_rslora use_dora load_in_8bit
load_in_4bit bnb_4bit_quant_type use_bnb_nested_quant bnb_4bit_quant_storage
dataset_name dataset_config dataset_train_split dataset_test_split dataset_streaming ignore_bias_buffers
datasets streaming test_split_size reward_model_name_or_path reward_funcs config
""".split())
CUTOFF = 0.85  # difflib's ratio: one or two letters off in a long name; lr_warmup_steps vs ..._ratio stays apart


@functools.lru_cache(maxsize=1)
def trl_fields() -> frozenset[str]:
    """Every field a TRL GRPO run can set: TRL's own and the installed TrainingArguments' (if transformers loads)."""
    try:
        from transformers import TrainingArguments
    except Exception:  # a broken or missing transformers: TRL's own names still catch most typos
        return TRL_OWN_FIELDS
    return TRL_OWN_FIELDS | {f.name for f in dataclasses.fields(TrainingArguments)}


def closest(name: str, known: Iterable[str]) -> str | None:
    """The one known name ``name`` is most likely a misspelling of, or None (``name`` is known, or nothing is close)."""
    known = set(known)
    if name in known:
        return None
    found = difflib.get_close_matches(name, sorted(known), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def trl_typo(field: str) -> str | None:
    """The reason to print for a field TRL does not have but nearly does, else None."""
    close = closest(field, trl_fields())
    if close is None:
        return None
    return f"not a field of TRL's GRPOConfig or TrainingArguments (TRL refuses it): did you mean {close}?"


def verl_typo(key: str, translated: Iterable[str]) -> str | None:
    """The reason to print for an override whose last part nearly names one memrl translates under the same parent."""
    parent, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2] for k in translated if k.rpartition(".")[0] == parent}
    close = closest(leaf, siblings)
    if close is None:
        return None
    full = f"{parent}.{close}" if parent else close
    return f"not a verl setting (Hydra refuses it): did you mean {full}?"
