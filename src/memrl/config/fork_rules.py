"""``memrl config from-verl`` rules for verl's forks: verl-agent (GiGPO), MemAgent and ReMemR1 (``recurrent``),
and the precision verl's FSDP actor trains in. Each rule reads the script's flags (``given``), records the memrl
settings in ``out`` and marks the flags it consumed (see :func:`memrl.config.from_verl.translate`)."""

from __future__ import annotations

from typing import Any

from memrl.config.verl_script import A, Translation


def gigpo_rule(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    """verl-agent's settings: its group size ``env.rollout.n`` (verl's ``rollout.n`` stays 1 in its scripts)
    and GiGPO's ``algorithm.gigpo.*``, whose ``mode`` defaults to ``mean_norm`` there."""
    group = given.get("env.rollout.n")
    if isinstance(group, int) and not isinstance(group, bool) and group > 0:
        out.used.add("env.rollout.n")
        out.set("algorithm.n", group, source("env.rollout.n"))
    if "algorithm.gigpo.step_advantage_w" in given:
        out.used.add("algorithm.gigpo.step_advantage_w")
        out.set("algorithm.step_weight", float(given["algorithm.gigpo.step_advantage_w"]),
                source("algorithm.gigpo.step_advantage_w"))
    mode = given.get("algorithm.gigpo.mode")
    if mode is not None:
        out.used.add("algorithm.gigpo.mode")
        norms = {"mean_std_norm": "mean_std", "mean_norm": "mean"}
        if mode in norms:
            out.set("algorithm.turn_norm", norms[mode], source("algorithm.gigpo.mode"))
        else:
            out.skipped["algorithm.gigpo.mode"] = f"{mode!r}: memrl normalises by mean_std_norm or mean_norm"
    elif given.get("algorithm.adv_estimator") == "gigpo":
        out.set("algorithm.turn_norm", "mean", "verl-agent's default (algorithm.gigpo.mode=mean_norm)")
    if given.get("algorithm.gigpo.enable_similarity") is True:
        out.used.update({"algorithm.gigpo.enable_similarity", "algorithm.gigpo.similarity_thresh"})
        key = "algorithm.gigpo.similarity_thresh"  # verl-agent's default when the script leaves it out
        out.set("algorithm.state_similarity", float(given.get(key, 0.95)),
                source(key if key in given else "algorithm.gigpo.enable_similarity"))
    elif "algorithm.gigpo.similarity_thresh" in given:
        out.used.add("algorithm.gigpo.similarity_thresh")
        out.skipped["algorithm.gigpo.similarity_thresh"] = "read only with algorithm.gigpo.enable_similarity=True"


def precision_rule(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    """verl's FSDP actor keeps its weights in fp32 (``fsdp_config.model_dtype`` unset: fp32 for the actor) and
    computes in bf16; memrl's update runs on the weights' dtype, so fp32 is what keeps small Adam steps."""
    key = A + "fsdp_config.model_dtype"
    dtype = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16"}.get(
        str(given.get(key, "fp32")))
    if dtype is not None:
        out.used.add(key)
        out.set("model.dtype", dtype, source(key) if key in given else "verl's FSDP actor keeps fp32 weights")


def memory_agent_rule(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    """MemAgent's and ReMemR1's verl forks (``recurrent.enable=memory``): the workflow, its chunk size, their
    trainers' mini-batch layout on the script's GPUs, and ReMemR1's state-advantage mix (``algorithm.alpha``)."""
    if given.get("recurrent.enable") != "memory":
        alpha = given.get("algorithm.alpha")
        if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha < 1:
            out.used.add("algorithm.alpha")
            out.skipped["algorithm.alpha"] = (
                f"ReMemR1's state-advantage mix: set workflow.name=rememr1, workflow.options.state_reward_alpha="
                f"{alpha}, workflow.options.rememr1_variant=released (its 2x) and algorithm.step_rewards=true")
        return
    out.used.update({"recurrent.enable", "recurrent.memory.path"})
    revisit = "memory_revisit" in str(given.get("recurrent.memory.path", ""))
    out.set("workflow.name", "rememr1" if revisit else "memagent", source("recurrent.enable", "recurrent.memory.path"))
    if revisit:
        out.set("workflow.options.rememr1_variant", "released", source("recurrent.memory.path"))
    if isinstance(given.get("recurrent.memory.config.chunk_size"), int):
        out.used.add("recurrent.memory.config.chunk_size")
        out.set("workflow.options.chunk_tokens", given["recurrent.memory.config.chunk_size"],
                source("recurrent.memory.config.chunk_size"))
    out.set("trainer.minibatch_order", "turn_major", source("recurrent.enable") + " (its batch layout)")
    nodes, gpus = given.get("trainer.nnodes", 1), given.get("trainer.n_gpus_per_node", 8)  # verl's defaults
    out.used.update({"trainer.nnodes", "trainer.n_gpus_per_node"})
    if isinstance(nodes, int) and isinstance(gpus, int):
        out.set("trainer.minibatch_ranks", nodes * gpus, source("trainer.nnodes", "trainer.n_gpus_per_node")
                if "trainer.nnodes" in given or "trainer.n_gpus_per_node" in given else "verl's 1 node x 8 GPUs")
    else:  # a variable the script leaves to its environment
        out.skipped["trainer.nnodes"] = (f"{nodes!r} x {gpus!r} GPUs is not a number here: set "
                                         "trainer.minibatch_ranks to the run's GPU count (its mini-batch layout)")
    alpha = given.get("algorithm.alpha")
    if revisit and isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha < 1:
        out.used.add("algorithm.alpha")
        out.set("algorithm.step_rewards", True, source("algorithm.alpha"))
        out.set("workflow.options.state_reward_alpha", float(alpha), source("algorithm.alpha"))


# where DAPO scripts put the overlong buffer: the recipe's first scripts, its reward_kwargs, verl's reward group
OVERLONG = ("reward_model.overlong_buffer.", "reward_model.reward_kwargs.overlong_buffer_cfg.",
            "reward.reward_kwargs.overlong_buffer_cfg.")
MAX_RESP = ("reward_model.reward_kwargs.max_resp_len", "reward.reward_kwargs.max_resp_len", "data.max_response_length")
FILTER_METRICS = {"acc": "score", "score": "score", "seq_reward": "reward", "seq_final_reward": "reward"}


def dapo_rule(get: Any, out: Translation, given: dict[str, Any], source: Any) -> None:
    """verl's DAPO recipe: its generation batch (``data.gen_batch_size``), the group filter's metric, and the
    soft overlong punishment of its reward manager (``max_resp_len`` defaults to ``data.max_response_length``,
    as its main_dapo.py passes it)."""
    enabled = given.get("algorithm.filter_groups.enable") is True
    for key, memrl_key, convert in (("data.gen_batch_size", "algorithm.dynamic_sampling_prompts", int),
                                    ("algorithm.filter_groups.metric", "algorithm.dynamic_sampling_metric",
                                     FILTER_METRICS.__getitem__)):
        if key not in given:
            continue
        out.used.add(key)
        if not enabled:
            out.skipped[key] = "read by verl's DAPO loop with algorithm.filter_groups.enable=True only"
            continue
        try:
            out.set(memrl_key, convert(given[key]), source(key))
        except (KeyError, TypeError, ValueError):
            out.skipped[key] = f"{given[key]!r}: memrl filters on the reward or on the score before overlong shaping"
    prefix = next((p for p in OVERLONG if given.get(p + "enable") is True), None)
    out.used.update(p + k for p in OVERLONG for k in ("enable", "len", "penalty_factor", "log") if p + k in given)
    if prefix is None:
        return
    resp = next((k for k in MAX_RESP if isinstance(given.get(k), int)), None)
    if resp is None or not isinstance(given.get(prefix + "len"), int):
        out.skipped[prefix + "enable"] = ("the overlong buffer needs its length and max_resp_len as numbers: set "
                                          "algorithm.overlong_buffer and algorithm.overlong_max_tokens yourself")
        return
    out.used.add(resp)
    out.set("algorithm.overlong_buffer", given[prefix + "len"], source(prefix + "len"))
    out.set("algorithm.overlong_max_tokens", given[resp], source(resp))
    out.set("algorithm.overlong_penalty_factor", float(given.get(prefix + "penalty_factor", 1.0)),
            source(prefix + "penalty_factor"))
