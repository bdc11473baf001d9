"""TRL's batch and step counts as memrl's (part of ``memrl config from-trl``, :mod:`memrl.config.from_trl`).

Why apart: TRL counts in completions per process and optimizer steps, memrl in prompts per step and steps of
generate-then-update. TRL generates ``generation_batch_size`` completions at once (``per_device_train_batch_size``
x processes x ``steps_per_generation``, i.e. that many / ``num_generations`` prompts) and trains on them for
``num_iterations`` passes of ``steps_per_generation / gradient_accumulation_steps`` optimizer steps each; memrl's
step is one such generation: ``trainer.prompts_per_step`` prompts, ``trainer.mini_batches`` optimizer steps per
PPO epoch, ``algorithm.ppo_epochs`` epochs. TRL's ``max_steps``, ``save_steps`` and warm-up count optimizer steps:
divided here by the optimizer steps of one memrl step.
"""

from __future__ import annotations

import math
from typing import Any

from memrl.config.verl_script import Translation

BATCH_FIELDS = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                "generation_batch_size", "num_generations")


def batches_rule(get: Any, out: Translation, given: dict[str, Any], source: Any, processes: int) -> None:
    """Prompts per step, mini-batches, and the step counts (``processes``: the run's process count)."""
    per_device, accumulate = int(get("per_device_train_batch_size")), int(get("gradient_accumulation_steps"))
    per_gen, gen_batch, n = get("steps_per_generation"), get("generation_batch_size"), int(get("num_generations"))
    if gen_batch is not None and per_gen is not None:
        out.skipped["generation_batch_size"] = "given with steps_per_generation: TRL refuses the pair; give one"
        return
    if gen_batch is None:
        per_gen = int(per_gen or accumulate)
        gen_batch = per_device * processes * per_gen
    elif int(gen_batch) % (per_device * processes):
        out.skipped["generation_batch_size"] = (f"{gen_batch} is not a multiple of per_device_train_batch_size x "
                                                f"{processes} processes: TRL refuses it")
        return
    else:
        per_gen = int(gen_batch) // (per_device * processes)
    where = f"{source(*BATCH_FIELDS)}, {processes} process{'es' if processes != 1 else ''}"
    if int(gen_batch) % n or per_gen % accumulate or per_gen < accumulate:
        out.skipped["per_device_train_batch_size"] = (
            f"{gen_batch} completions a generation, {per_gen} steps per generation, {accumulate} accumulated: not "
            f"whole groups of {n} or whole optimizer steps; set trainer.prompts_per_step and trainer.mini_batches")
        for key in ("max_steps", "save_steps", "warmup_steps", "warmup_ratio"):
            out.used.add(key)
            if key in given:
                out.skipped[key] = "needs the batch split above (TRL counts optimizer steps): set trainer.* yourself"
        return
    out.set("trainer.prompts_per_step", int(gen_batch) // n, where)
    minis = per_gen // accumulate
    out.set("trainer.mini_batches", minis, where)
    updates = minis * int(get("num_iterations"))  # TRL optimizer steps in one memrl step
    _counts(get, out, given, source, updates)


def _counts(get: Any, out: Translation, given: dict[str, Any], source: Any, updates: int) -> None:
    """max_steps, save_steps, warm-up: TRL's optimizer steps over ``updates`` per memrl step."""
    def steps(value: float) -> int:
        return max(int(math.ceil(value / updates)), 1)

    per = f" ({updates} TRL optimizer steps a memrl step)" if updates > 1 else ""
    try:
        max_steps = int(get("max_steps"))
    except (TypeError, ValueError):
        out.skipped["max_steps"] = f"{get('max_steps')!r} is not a value memrl can read (a variable set elsewhere?)"
        max_steps = 0
    if max_steps > 0:
        out.set("trainer.total_steps", steps(max_steps), source("max_steps") + per)
        if max_steps % updates:
            out.skipped["(steps)"] = (f"max_steps={max_steps} is not a whole number of memrl steps of {updates} "
                                      f"optimizer steps: rounded up to {steps(max_steps) * updates}")
    elif "max_steps" not in out.skipped:
        out.skipped["max_steps" if "max_steps" in given else "num_train_epochs"] = (
            "TRL trains num_train_epochs over its dataset: memrl counts steps, set trainer.total_steps")
    if get("save_strategy") == "steps":
        out.set("trainer.save_every", steps(_absolute(float(get("save_steps")), max_steps)), source("save_steps") + per)
    warm = _absolute(float(get("warmup_steps")), max_steps)  # transformers 5: a value below 1 is a ratio
    if not warm and float(get("warmup_ratio")) > 0 and max_steps > 0:
        warm = math.ceil(float(get("warmup_ratio")) * max_steps)
    if warm and get("lr_scheduler_type") == "constant":  # transformers' "constant" has no warm-up
        out.skipped["warmup_steps" if "warmup_steps" in given else "warmup_ratio"] = (
            "lr_scheduler_type=constant has no warm-up in transformers (constant_with_warmup has)")
    elif warm:
        out.set("trainer.warmup_steps", steps(warm), source("warmup_steps", "warmup_ratio") + per)
    out.used.add("num_train_epochs")


def _absolute(value: float, max_steps: int) -> float:
    """A step count as transformers reads it: below 1, a share of ``max_steps``."""
    return math.ceil(value * max_steps) if 0 < value < 1 and max_steps > 0 else value
