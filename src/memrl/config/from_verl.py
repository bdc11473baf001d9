"""Translate a verl launch script's Hydra overrides into a memrl config (``memrl config from-verl``).

Why: memrl's users arrive with a 60-flag ``python -m verl.trainer.main_ppo ...`` script. Most flags name
the same idea in both (group size, clip ratios, KL loss, learning rate), many are GPU plumbing that memrl
sizes itself (tensor parallelism, micro-batch sizes per GPU, offloading), and a few have no counterpart.
This module reads the ``key=value`` words of the script, fills in verl 0.9's defaults for what the script
leaves out (where they differ from memrl's, running the translated config is running verl's), and says
for every flag it does not translate why not.

The translation is of the *settings*, not of the task: the workflow, reward and data layout are memrl's
own (``workflow.*``, ``data.train_file``), so a translated config still names them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memrl.config.field_typos import verl_typo
from memrl.config.fork_rules import dapo_rule, gigpo_rule, memory_agent_rule, precision_rule
from memrl.config.verl_script import (A, M, R, Translation, overrides_of, render_yaml,  # noqa: F401 (re-exported)
                                      scalar)


# verl 0.9.0's defaults (verl/trainer/config/_generated_ppo_trainer.yaml) for the settings translated here
VERL_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 1024, R + "n": 1, A + "ppo_mini_batch_size": 256, A + "ppo_epochs": 1,
    A + "clip_ratio_low": 0.2, A + "clip_ratio_high": 0.2, A + "clip_ratio_c": 3.0, A + "loss_agg_mode": "token-mean",
    A + "policy_loss.loss_mode": "vanilla", A + "tau_pos": 1.0, A + "tau_neg": 1.05, A + "entropy_coeff": 0.0,
    A + "use_kl_loss": False, A + "kl_loss_coef": 0.001, A + "kl_loss_type": "low_var_kl", A + "optim.lr": 1e-6,
    A + "optim.weight_decay": 0.01, A + "optim.lr_warmup_steps": -1, A + "optim.lr_scheduler_type": "constant",
    A + "optim.clip_grad": 1.0, R + "temperature": 1.0, R + "top_p": 1.0, R + "top_k": -1,
    R + "val_kwargs.temperature": 0.0, R + "val_kwargs.top_p": 1.0, R + "val_kwargs.n": 1,
    R + "val_kwargs.do_sample": False,
    "algorithm.adv_estimator": "gae", "algorithm.norm_adv_by_std_in_grpo": True, "algorithm.gamma": 1.0,
    "algorithm.filter_groups.enable": False, "algorithm.filter_groups.max_num_gen_batches": 0,
    "trainer.test_freq": -1, M + "lora_rank": 0, M + "lora_alpha": 16,
    M + "target_modules": "all-linear", M + "enable_gradient_checkpointing": True,
}
PLUMBING = ("n_gpus_per_node", "nnodes", "tensor_model_parallel_size", "gpu_memory_utilization", "fsdp_config",
            "micro_batch_size", "log_prob_", "ulysses", "offload", "use_remove_padding", "chunked_prefill",
            "max_num_batched_tokens", "max_num_seqs", "enforce_eager", "free_cache_engine", "use_dynamic_bsz",
            "ppo_infer_", "max_model_len", "dataloader_num_workers", "use_torch_compile", "use_fused_kernels",
            "ray_", "nccl", "resources_per_worker", "strategy", "load_format", "layered_summon", "rollout.mode",
            "ppo_max_token_len_per_gpu", "megatron", "checkpoint_engine", "parallel_size", "entropy_from_logits",
            "override_optimizer_config", "engine_kwargs", "prefix_caching", "trainer.device", "calculate_log_probs",
            "entropy_checkpointing", "actor_rollout_ref.ref.", "hybrid_engine", "nccl_timeout", "agent.num_workers",
            "use_shm", "rollout.dtype", "balance_batch", "cudagraph")
BOOKKEEPING = ("logger", "experiment_name", "val_before_train", "resume_mode", "resume_from_path", "critic_warmup",
               "log_val_generations", "profiler", "checkpoint.", "trust_remote_code", "filter_overlong_prompts",
               "truncation", "prompt_key", "shuffle", "seed")
ADV_ESTIMATORS = {"grpo": "grpo", "rloo": "rloo", "reinforce_plus_plus": "reinforce_plus_plus",
                  "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline", "gigpo": "gigpo",
                  "grpo_passk": "grpo_passk", "gpg": "gpg", "gdpo": "gdpo", "opo": "opo",
                  "remax": "remax",
                  # verl's TIR variant compacts the generated tokens, as memrl's; the plain one equals it without gaps
                  "optimal_token_baseline": "optimal_token_baseline",
                  "tir_optimal_token_baseline": "optimal_token_baseline",
                  # verl's vectorized twins: the same numbers for groups of two or more, all memrl trains
                  "grpo_vectorized": "grpo", "rloo_vectorized": "rloo"}
# verl flags of one policy loss -> memrl's algorithm field (written only for the loss the script picks)
LOSS_OPTIONS = {A + "tau_pos": "sapo_tau_pos", A + "tau_neg": "sapo_tau_neg",
                **{A + f"policy_loss.{k}": k for k in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
                                                       "dro_beta")},
                A + "policy_loss.ppo_kl_coef": "kl_cov_coef"}
TRL_ONLY_LOSSES = ("luspo", "vespo")  # memrl's, from TRL: verl has no loss_mode of these names
RC_KEYS = ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold",
           "bypass_mode", "loss_type")


# Config groups only verl has (memrl shares algorithm.*, trainer.*, data.*): a script sets at least one.
VERL_ONLY_GROUPS = ("actor_rollout_ref", "critic", "reward_model", "custom_reward_function")


SIMPLE: list[tuple[str, str, Callable[[Any], Any]]] = [  # (verl key, memrl key, conversion)
    (R + "n", "algorithm.n", int), (A + "ppo_epochs", "algorithm.ppo_epochs", int),
    (A + "clip_ratio_low", "algorithm.clip_ratio_low", float), (A + "clip_ratio_high", "algorithm.clip_ratio_high", float),
    (A + "clip_ratio_c", "algorithm.clip_ratio_c", float), (A + "entropy_coeff", "algorithm.entropy_coef", float),
    (A + "loss_scale_factor", "algorithm.loss_scale_factor", int),
    (A + "kl_loss_type", "algorithm.kl_estimator", str), (A + "optim.lr", "trainer.lr", float),
    (A + "optim.weight_decay", "trainer.weight_decay", float), ("algorithm.gamma", "algorithm.gamma", float),
    ("data.shuffle", "data.shuffle", bool), (A + "calculate_sum_pi_squared", "algorithm.variance_proxy", bool),
    (R + "temperature", "sampling.temperature", float), (R + "top_p", "sampling.top_p", float),
    (R + "top_k", "sampling.top_k", lambda v: max(int(v), 0)),
    (R + "val_kwargs.temperature", "trainer.eval.temperature", float),
    (R + "val_kwargs.top_p", "trainer.eval.top_p", float), (R + "val_kwargs.n", "trainer.eval.n", int),
    ("data.train_batch_size", "trainer.prompts_per_step", int), (M + "path", "model.path", str),
    (M + "enable_gradient_checkpointing", "trainer.gradient_checkpointing", bool),
    ("trainer.total_training_steps", "trainer.total_steps", int),
    ("trainer.save_freq", "trainer.save_every", lambda v: int(v) if int(v) > 0 else None),
    ("trainer.default_local_dir", "trainer.output_dir", str),
    ("trainer.max_actor_ckpt_to_keep", "trainer.keep_checkpoints", int),
    ("algorithm.filter_groups.enable", "algorithm.dynamic_sampling", bool),
    ("algorithm.filter_groups.max_num_gen_batches", "algorithm.max_gen_batches", lambda v: max(int(v), 0)),
    ("data.train_files", "data.train_file", str), ("data.val_files", "data.eval_file", str),
    *((f"algorithm.rollout_correction.{k}", f"algorithm.rollout_correction.{k}", lambda v: v) for k in RC_KEYS),
]


def translate(flags: dict[str, str]) -> Translation:
    """memrl settings for a verl script's overrides, verl's defaults filling in what the script leaves out."""
    out = Translation()
    given = {k: scalar(v) for k, v in flags.items()}

    def get(key: str) -> Any:
        out.used.add(key)
        return given.get(key, VERL_DEFAULTS.get(key))

    def source(*keys: str) -> str:
        named = [k for k in keys if k in given]
        return ", ".join(f"{k}={flags[k]}" for k in named) if named else "verl's default"

    for verl_key, key, cast in SIMPLE:
        value = get(verl_key)
        try:
            converted = None if value is None else cast(value)
        except (TypeError, ValueError):
            out.skipped[verl_key] = f"{value!r} is not a value memrl can read (a variable the script sets elsewhere?)"
            continue
        if converted is not None:
            out.set(key, converted, source(verl_key))
        elif verl_key in given and value is None:
            _explicit_null(verl_key, key, out, source)
        elif value is not None:  # -1 / 0 meaning "never" / "no limit" in verl: memrl needs a number
            out.skipped[verl_key] = f"{value!r} (never / no limit in verl): set {key} to a number yourself"
    for rule in (_batches, _kl, _estimator, _policy_loss, _schedule, _lora, _eval_every, _engine, _grad_clip,
                 _wandb, gigpo_rule, memory_agent_rule, precision_rule, dapo_rule):
        try:
            rule(get, out, given, source)
        except (TypeError, ValueError, ZeroDivisionError) as err:  # most often a value skipped above as unreadable
            unread = [k for k, why in out.skipped.items() if "is not a value memrl can read" in why]
            out.skipped[f"({rule.__name__.strip('_')})"] = (
                f"not translated: it needs {unread[0]}, which memrl could not read (above)" if unread
                else f"not translated: {err}")
    for key in flags:
        if key not in out.used:
            out.skipped[key] = why_skipped(key, given[key])
    return _valid(out)


def _explicit_null(verl_key: str, key: str, out: Translation, source: Any) -> None:
    """A flag set to null: verl then skips what it sets (no importance weights for ``rollout_is_threshold=null``,
    rollout_corr_helper reads both), so translate the meaning; elsewhere memrl's key gets null too (a key that
    refuses it is left out by :func:`_valid`, saying so, rather than silently keeping memrl's default)."""
    if verl_key == "algorithm.rollout_correction.rollout_is_threshold":
        out.set("algorithm.rollout_correction.rollout_is", None, source(verl_key))  # verl: metrics, no weights
        return
    out.set(key, None, source(verl_key))


def _valid(t: Translation, default: str = "verl's default") -> Translation:
    """Drop each translated value memrl's config refuses (a 0 batch, say), saying why, until the rest loads
    (``default``: the source of a value the original's defaults gave)."""
    from pydantic import ValidationError

    from memrl.config.schema import MemRLConfig

    for _ in range(len(t.settings) + 1):
        try:
            MemRLConfig.model_validate(nested(t))
            return t
        except ValidationError as exc:
            bad = [".".join(str(p) for p in e["loc"]) for e in exc.errors()]
            hit = [k for k in bad if k in t.settings]
            if not hit:
                raise ValueError(f"the translated config does not load: {exc.errors()[0]['msg']}") from None
            for key, e in zip(bad, exc.errors()):
                if key in t.settings:
                    value, source = t.settings.pop(key)
                    named = source.split(",")[0].split("=", 1)[0] if "=" in source else key  # the flag that gave it
                    t.skipped[named] = (
                        f"memrl's {key} refuses {value!r}: {str(e['msg']).removeprefix('Value error, ')}")
    return t


def nested(t: Translation) -> dict[str, Any]:
    """The settings as a config tree (``a.b.c: v`` -> ``{"a": {"b": {"c": v}}}``)."""
    tree: dict[str, Any] = {}
    for key, (value, _) in t.settings.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def _batches(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    prompts, mini = get("data.train_batch_size"), get(A + "ppo_mini_batch_size")
    if prompts % mini:
        out.skipped[A + "ppo_mini_batch_size"] = (f"{prompts} prompts do not split into mini-batches of {mini}: "
                                                  "set trainer.mini_batches yourself")
    else:
        out.set("trainer.mini_batches", prompts // mini, source("data.train_batch_size", A + "ppo_mini_batch_size"))


def _kl(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    on, coef = bool(get(A + "use_kl_loss")), float(get(A + "kl_loss_coef"))
    out.set("algorithm.kl_coef", coef if on else 0.0, source(A + "use_kl_loss", A + "kl_loss_coef"))


def _estimator(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    """verl's estimator; MemAgent's and ReMemR1's forks read ``algorithm.grpo_use_adv`` in place of
    ``norm_adv_by_std_in_grpo`` (their scripts set it False: Dr.GRPO's centring without the std)."""
    name, by_std = get("algorithm.adv_estimator"), get("algorithm.norm_adv_by_std_in_grpo")
    where = source("algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo")
    if "algorithm.grpo_use_adv" in given:
        out.used.add("algorithm.grpo_use_adv")
        by_std = given["algorithm.grpo_use_adv"] is True
        where = source("algorithm.adv_estimator", "algorithm.grpo_use_adv")
    if name in ("grpo", "grpo_vectorized") and not by_std:
        out.set("algorithm.adv_estimator", "dr_grpo", where)
    elif name in ("grpo_passk", "gdpo") and not by_std:
        out.skipped["algorithm.adv_estimator"] = f"{name} without the std: memrl's {name} divides by it"
    elif name in ADV_ESTIMATORS:
        out.set("algorithm.adv_estimator", ADV_ESTIMATORS[name], where)
    else:
        out.skipped["algorithm.adv_estimator"] = (f"{name!r}: memrl has no critic (gae) or no such estimator; it "
                                                  f"translates verl's {', '.join(ADV_ESTIMATORS)}")
    _gdpo(name, out, given, source)


def _gdpo(name: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    """GDPO's reward keys and weights (Hydra lists: ``'[format,acc]'``), written with the gdpo estimator only."""
    if name == "gdpo" and "algorithm.gdpo_reward_keys" not in given:
        out.settings.pop("algorithm.adv_estimator", None)
        out.skipped["algorithm.adv_estimator"] = "gdpo without algorithm.gdpo_reward_keys (verl asserts them)"
    for key in ("algorithm.gdpo_reward_keys", "algorithm.gdpo_reward_weights"):
        out.used.add(key)
        if key not in given:
            continue
        if out.settings.get("algorithm.adv_estimator", (None,))[0] != "gdpo":
            out.skipped[key] = (f"read by verl's gdpo estimator only (this script's is {name})" if name != "gdpo"
                                else "gdpo itself is left out (no reward keys)")
            continue
        items = [x.strip().strip("'\"") for x in str(given[key]).strip("[]").split(",") if x.strip()]
        out.set(key, [float(x) for x in items] if key.endswith("weights") else items, source(key))


def _policy_loss(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    from memrl.config.registry import POLICY_LOSSES

    mode = get(A + "policy_loss.loss_mode")
    if mode == "bypass_mode":  # verl's own loss behind rollout_correction.bypass_mode, which selects it itself
        on = given.get("algorithm.rollout_correction.bypass_mode") is True  # scalar() made "True" a bool
        out.skipped[A + "policy_loss.loss_mode"] = (
            "'bypass_mode' is the loss of algorithm.rollout_correction.bypass_mode=True, translated there" if on else
            "'bypass_mode' needs algorithm.rollout_correction.bypass_mode=True (verl fails without it), not set here")
        return
    if mode not in POLICY_LOSSES.names or mode in TRL_ONLY_LOSSES:
        verl = [n for n in POLICY_LOSSES.names if n not in TRL_ONLY_LOSSES]
        out.skipped[A + "policy_loss.loss_mode"] = f"{mode!r} is not one of verl's that memrl has: {', '.join(verl)}"
        return
    out.set("algorithm.policy_loss", mode, source(A + "policy_loss.loss_mode"))
    if not POLICY_LOSSES.get(mode).dual_clip:  # verl's GSPO scripts set clip_ratio_c=10, which its gspo never reads
        out.settings.pop("algorithm.clip_ratio_c", None)
        if A + "clip_ratio_c" in given:
            out.skipped[A + "clip_ratio_c"] = f"verl's {mode} does not read it (only vanilla PPO's dual clip does)"
    if not POLICY_LOSSES.get(mode).clip_range:  # a clip range set beside a loss with no clip does nothing in verl
        for side in ("clip_ratio_low", "clip_ratio_high"):
            out.settings.pop(f"algorithm.{side}", None)
            if A + side in given:
                out.skipped[A + side] = f"verl's {mode} has no clip and does not read it"
    reads = POLICY_LOSSES.get(mode).options
    for verl_key, key in LOSS_OPTIONS.items():
        out.used.add(verl_key)
        if key in reads and get(verl_key) is not None:
            out.set(f"algorithm.{key}", float(get(verl_key)), source(verl_key))
        elif verl_key in given:
            out.skipped[verl_key] = f"read only by another policy loss (this script's is {mode})"
    forced = POLICY_LOSSES.get(mode).aggregation
    agg = get(A + "loss_agg_mode")
    if forced is None:
        out.set("algorithm.loss_agg_mode", agg, source(A + "loss_agg_mode"))
    elif A + "loss_agg_mode" in given and agg != forced:
        out.skipped[A + "loss_agg_mode"] = f"verl's {mode} aggregates per sequence whatever loss_agg_mode says"


def _schedule(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    kind = given.get(A + "optim.warmup_style") or get(A + "optim.lr_scheduler_type")
    out.used.add(A + "optim.warmup_style")
    if kind in ("constant", "cosine"):
        out.set("trainer.lr_schedule", kind, source(A + "optim.lr_scheduler_type", A + "optim.warmup_style"))
    else:
        out.skipped[A + "optim.lr_scheduler_type"] = f"{kind!r}: memrl schedules constant or cosine"
    steps, ratio = get(A + "optim.lr_warmup_steps"), given.get(A + "optim.lr_warmup_steps_ratio", 0.0)
    out.used.add(A + "optim.lr_warmup_steps_ratio")
    total = given.get("trainer.total_training_steps")
    if steps is not None and steps >= 0:
        out.set("trainer.warmup_steps", int(steps), source(A + "optim.lr_warmup_steps"))
    elif ratio and total:
        out.set("trainer.warmup_steps", int(ratio * total), source(A + "optim.lr_warmup_steps_ratio",
                                                                    "trainer.total_training_steps"))
    elif ratio:
        out.skipped[A + "optim.lr_warmup_steps_ratio"] = "a ratio of steps verl counts from epochs: set trainer.warmup_steps"
    else:
        out.set("trainer.warmup_steps", 0, source(A + "optim.lr_warmup_steps"))


def _lora(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    rank = int(get(M + "lora_rank") or 0)
    out.set("lora.enabled", rank > 0, source(M + "lora_rank"))
    if rank > 0:
        out.set("lora.r", rank, source(M + "lora_rank"))
        out.set("lora.alpha", int(get(M + "lora_alpha")), source(M + "lora_alpha"))
        out.set("lora.target_modules", get(M + "target_modules"), source(M + "target_modules"))


def _eval_every(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    freq = int(get("trainer.test_freq"))
    out.set("trainer.eval.every", max(freq, 0), source("trainer.test_freq"))
    if get(R + "val_kwargs.do_sample") is False:  # verl validates greedily then, whatever the temperature
        out.set("trainer.eval.temperature", 0.0, source(R + "val_kwargs.do_sample"))


def _engine(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    name = given.get(R + "name")
    out.used.add(R + "name")
    if name in ("vllm", "hf"):
        out.set("engine.kind", name, source(R + "name"))
    elif name is not None:
        out.skipped[R + "name"] = f"{name!r}: run it as a server and use engine.kind=openai with its base URL"


def _grad_clip(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    """verl 0.9 clips at ``optim.clip_grad`` (``optim.grad_clip`` is its deprecated name); ``actor.grad_clip`` is
    declared but read by none of its engines, so it counts only where the script sets nothing else."""
    out.used.update({A + "grad_clip", A + "optim.grad_clip"})
    key = next((k for k in (A + "optim.clip_grad", A + "optim.grad_clip", A + "grad_clip") if k in given),
               A + "optim.clip_grad")
    out.set("trainer.grad_clip", float(get(key)), source(key))
    if key != A + "grad_clip" and A + "grad_clip" in given:
        out.skipped[A + "grad_clip"] = f"verl 0.9 clips at {key.removeprefix(A)} (actor.grad_clip is not read)"


def _wandb(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    if "wandb" in str(given.get("trainer.logger", "")) and "trainer.project_name" in given:
        out.used.update({"trainer.logger", "trainer.project_name"})
        out.set("trainer.wandb_project", str(given["trainer.project_name"]), source("trainer.project_name"))


def why_skipped(key: str, value: Any = None) -> str:
    """Why a verl flag has no memrl setting here."""
    if key == "algorithm.use_kl_in_reward":
        return ("False is what memrl does" if value is False else
                "memrl puts the KL in the loss only (algorithm.kl_coef), not in the reward")
    if key.startswith("algorithm.kl_ctrl."):
        return "verl's KL in the reward; memrl's KL is a loss term (algorithm.kl_coef, from use_kl_loss)"
    if key.endswith(("use_invalid_action_penalty", "invalid_action_penalty_coef")):
        return ("verl-agent's penalty for an unparsable action, taken after discounting from that step's return "
                "and its own copy of the episode score: no exact equivalent; ep.turn_reward(-coef) on the turn is "
                "close, but is discounted back to earlier turns and leaves the episode term alone")
    if key.startswith("distillation."):
        return "verl's distillation differs from memrl's on-policy distillation (teacher.*: reverse KL as advantage)"
    if key == "trainer.project_name":
        return "names the run for verl's loggers: memrl writes to trainer.output_dir (wandb: trainer.wandb_project)"
    if key.endswith(("max_prompt_length", "max_response_length", "prompt_length", "response_length")):
        return "a workflow sets its own prompt and response budgets (workflow.options, e.g. MemAgent's chunk tokens)"
    if any(p in key for p in PLUMBING):
        return "placement, parallelism and memory: memrl sizes these itself"
    if any(p in key for p in BOOKKEEPING):
        return "run bookkeeping memrl does its own way (trainer.*, memrl view)"
    if key == A + "clip_ratio":
        return "verl 0.9 uses clip_ratio_low/high (both 0.2 by default), which take precedence over clip_ratio"
    if key == "trainer.total_epochs":
        return "memrl counts steps: set trainer.total_steps (epochs x training prompts / data.train_batch_size)"
    if key.startswith(("data.", "reward_model.", "custom_reward_function.", "env.")):
        return "the task (data layout, reward, environment) is a memrl workflow's: workflow.* and data.train_file"
    return verl_typo(key, VERL_DEFAULTS) or "no memrl counterpart"
