"""The model, engine and optimiser side of ``memrl config from-trl`` (:mod:`memrl.config.from_trl`), and the ways
a translated run still trains differently from TRL's, said on standard error.

Why apart: these rules read TRL's ``ModelConfig`` (weights' dtype, LoRA) and ``TrainingArguments`` (gradient
clipping, weight decay, saving) rather than GRPO's algorithm fields, and each has a TRL/transformers default that
is easy to get wrong: TRL loads a model id in float32 unless told (``ModelConfig.dtype``), leaves LoRA's target
modules to peft's per-architecture default, and turns a one-item ``lora_target_modules`` list into its string
(``all-linear``).
"""

from __future__ import annotations

from typing import Any

from memrl.config.verl_script import Translation

DTYPES = ("float32", "bfloat16", "float16", "auto")
IS_FIELDS = ("vllm_mode", "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
             "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min", "vllm_importance_sampling_cap")
LORA_FIELDS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
NO_CLIP = 1e9  # memrl's grad_clip must be a number: one no gradient norm reaches


def vllm_rule(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """use_vllm -> the vLLM engine; TRL's vLLM importance sampling -> the rollout correction."""
    if not get("use_vllm"):
        _unread(out, given, "vllm_", "read with use_vllm only")
        return
    out.used.update(IS_FIELDS)
    if get("vllm_mode") == "colocate":
        out.set("engine.kind", "vllm", source("use_vllm", "vllm_mode"))
    else:
        out.skipped["vllm_mode"] = ("server: start the vLLM server yourself and set engine.kind=openai, "
                                    "engine.base_url=http://HOST:PORT/v1 (memrl syncs weights to it)")
    if not get("vllm_importance_sampling_correction"):
        return
    mode = str(get("vllm_importance_sampling_mode"))
    cap = get("vllm_importance_sampling_cap") or get("vllm_importance_sampling_clip_max")
    floor = get("vllm_importance_sampling_clip_min")
    level, _, kind = mode.partition("_")
    if cap is None or (kind == "truncate" and floor is not None):
        out.skipped["vllm_importance_sampling_mode"] = (f"{mode} with clip_min={floor}, clip_max={cap}: memrl "
                                                        "truncates from above only and needs an upper bound")
        return
    threshold: Any = float(cap) if kind == "truncate" else f"{floor if floor is not None else 1e-300}_{cap}"
    where = source(*IS_FIELDS[2:])
    out.set("algorithm.rollout_correction.rollout_is", level, where)
    out.set("algorithm.rollout_correction.rollout_is_threshold", threshold, where)


def peft_rule(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """use_peft -> LoRA; a one-item target list is its string (TRL's ModelConfig does that: ``all-linear``)."""
    if not get("use_peft"):
        _unread(out, given, "lora_", "read with use_peft only")
        return
    out.used.update(LORA_FIELDS)
    out.set("lora.enabled", True, source("use_peft"))
    if out.settings.pop("algorithm.ref_sync_every", None):  # TRL refuses the pair too
        out.settings.pop("algorithm.ref_mixup_alpha", None)
        out.skipped["sync_ref_model"] = "TRL refuses sync_ref_model with PEFT (the reference is the base model)"
    for trl_key, key, cast in (("lora_r", "r", int), ("lora_alpha", "alpha", int), ("lora_dropout", "dropout", float)):
        out.set(f"lora.{key}", cast(get(trl_key)), source(trl_key))
    modules = get("lora_target_modules")
    if isinstance(modules, list) and len(modules) == 1:
        modules = modules[0]
    if modules is None:
        out.skipped["lora_target_modules (TRL's default)"] = (
            "TRL leaves the adapted layers to peft's default for the architecture (q_proj and v_proj for Llama and "
            "Qwen): memrl's lora.target_modules is all-linear; set it to those to match")
    else:
        out.set("lora.target_modules", modules if isinstance(modules, str) else [str(m) for m in modules],
                source("lora_target_modules"))


def _unread(out: Translation, given: dict[str, Any], prefix: str, why: str) -> None:
    """Every given field starting with ``prefix`` left out, saying ``why`` (the switch that reads them is off)."""
    for key in (k for k in given if k.startswith(prefix)):
        out.skipped[key] = why
        out.used.add(key)


def dtype_rule(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """The weights' dtype: ModelConfig's ``dtype`` (``torch_dtype`` before), float32 by default (bf16 is only
    autocast in TRL); or the one in ``model_init_kwargs``."""
    init = given.get("model_init_kwargs")
    if isinstance(init, str):  # a command's JSON (TRL's parser decodes it: GRPOConfig._VALID_DICT_FIELDS)
        import json

        try:
            init = json.loads(init)
        except ValueError:
            out.skipped["model_init_kwargs"] = (f"{init!r} is not JSON memrl can read (the weights' dtype: set "
                                                "model.dtype)")
            return
    init = init if isinstance(init, dict) else {}
    named = [k for k in ("dtype", "torch_dtype") if k in given]
    out.used.update(("dtype", "torch_dtype"))
    if not named and ("dtype" in init or "torch_dtype" in init):
        out.used.add("model_init_kwargs")
    value = given[named[0]] if named else init.get("dtype", init.get("torch_dtype", "float32"))
    dtype = str(value).removeprefix("torch.")
    where = source(*named) if named else ("model_init_kwargs" if init.get("dtype", init.get("torch_dtype")) else
                                           "TRL's default (a model id loads in float32; bf16 is autocast)")
    if dtype in DTYPES:
        out.set("model.dtype", dtype, where)
    else:
        out.skipped[named[0] if named else "dtype"] = f"{dtype!r}: memrl's model.dtype is one of {', '.join(DTYPES)}"


def grad_clip_rule(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """max_grad_norm; 0 or null is no clipping in transformers."""
    out.used.add("max_grad_norm")
    norm = given.get("max_grad_norm", 1.0)
    if norm is None or float(norm) <= 0:
        out.set("trainer.grad_clip", NO_CLIP, f"{source('max_grad_norm')} (no clipping)")
    else:
        out.set("trainer.grad_clip", float(norm), source("max_grad_norm"))


def translated_aggregation(out: Translation) -> str:
    """The loss_agg_mode the translated config trains with: the one written, else the policy loss's own, else
    memrl's default (token-mean)."""
    from memrl.config.registry import POLICY_LOSSES

    if "algorithm.loss_agg_mode" in out.settings:
        return str(out.settings["algorithm.loss_agg_mode"][0])
    policy = out.settings.get("algorithm.policy_loss", ("vanilla",))[0]
    return getattr(POLICY_LOSSES.get(policy), "aggregation", None) or "token-mean"


def differences_rule(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """What the translated run still does otherwise than TRL's, as notes (docs/guides/from-trl.md explains)."""
    minis = out.settings.get("trainer.mini_batches", (1,))[0]
    updates = minis * out.settings.get("algorithm.ppo_epochs", (1,))[0]
    token_mean = get("loss_type") in ("dapo", "cispo", "vespo")
    if token_mean and minis > 1:
        out.skipped["(loss normaliser)"] = (
            f"TRL's {get('loss_type')} divides each optimizer step by the tokens of the whole generation, memrl by "
            f"its mini-batch's: TRL's gradients are 1/{minis} of memrl's (what max_grad_norm clips differs)")
    if updates > 1 and (get("lr_scheduler_type") == "cosine" or out.settings.get("trainer.warmup_steps")):
        out.skipped["(schedule)"] = (f"memrl moves the learning rate once a step ({updates} TRL optimizer steps), "
                                     "TRL at every optimizer step")
    bonus = float(get("entropy_coef") or 0) > 0 or get("use_adaptive_entropy")
    aggregation = translated_aggregation(out)
    if bonus and aggregation != "token-mean":  # memrl aggregates the bonus as the loss; TRL's is a token mean
        out.skipped["(entropy bonus)"] = (f"memrl aggregates the bonus as the loss ({aggregation}; luspo: summed "
                                          "over each row), TRL takes the mean per-token entropy")
    if float(get("weight_decay") or 0) > 0:
        out.skipped["(weight decay)"] = ("transformers leaves biases and norm weights undecayed; memrl decays every "
                                         "weight")
    out.used.update(("save_strategy", "save_total_limit"))
    if get("save_strategy") != "steps":
        out.skipped["save_strategy"] = f"{get('save_strategy')!r}: memrl saves every trainer.save_every steps (kept 10)"
    if "save_total_limit" in given and given["save_total_limit"] is None:
        out.skipped["save_total_limit"] = "null (keep all): memrl keeps trainer.keep_checkpoints (a number)"
