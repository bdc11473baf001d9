"""The needle demo's GRPO stage runs its steps, then 10 more at a time while training has not settled.

Why: on one machine (a 2-core AMD EPYC) seed 6's warm start kept one code in memory 5% of the time; after the
demo's 40 steps GRPO had not yet learned to keep it (training reward of the last steps 0.84, held-out 68.8%)
while 20 more steps took it to 93.8%. Every other seed's training reward was at 0.92-0.99 by then. How fast
a seed learns depends on the CPU's rounding, so a fixed step count is luck, as the warm start's was
(:mod:`memrl_demo.warm_check`). The decision reads the *training* reward only (``metrics.jsonl``), never the
held-out documents the demo reports on. A seed that has settled trains exactly as before; resuming from the
last checkpoint continues the same run (constant learning rate, exact resume), so 40 + 10 steps are the first
50 steps of a 50-step run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MIN_REWARD = 0.9  # mean training reward of the last WINDOW steps a settled run has reached
WINDOW = 5
CHUNK = 10  # steps added at a time


def recent_reward(run_dir: Path, window: int = WINDOW) -> float:
    """Mean ``reward`` of the last ``window`` training steps in ``run_dir/metrics.jsonl`` (eval rows skipped)."""
    from memrl.io.metrics import read_metrics

    rewards = [r["reward"] for r in read_metrics(run_dir) if "reward" in r]
    if not rewards:
        raise ValueError(f"{run_dir}/metrics.jsonl has no training reward yet")
    tail = rewards[-window:]
    return sum(tail) / len(tail)


def train_until_settled(cfg: Any, console: Any, max_extra: int, chunk: int = CHUNK,
                        **trainer_kw: Any) -> tuple[Any, int]:
    """Train ``cfg`` to its ``total_steps``, then ``chunk`` more steps at a time (at most ``max_extra``) while the
    training reward of the last steps is under ``MIN_REWARD``: (the last trainer, extra steps run).
    ``trainer_kw`` go to every :class:`~memrl.train.trainer.Trainer` (tests give an engine)."""
    from memrl.train.trainer import Trainer

    trainer = Trainer(cfg, tracker_console=console, **trainer_kw)
    trainer.run()
    extra, run_dir = 0, Path(cfg.trainer.output_dir)
    while extra < max_extra:
        reward = recent_reward(run_dir)
        if reward >= MIN_REWARD:
            break
        more = min(chunk, max_extra - extra)
        extra += more
        console.print(f"GRPO: training reward of the last {WINDOW} steps {reward:.2f} < {MIN_REWARD:.2f}, not settled: "
                      f"{more} more steps (at most {max_extra} more in all)", highlight=False)
        steps = cfg.trainer.total_steps + more
        cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"total_steps": steps})})
        trainer = Trainer(cfg, tracker_console=console, **trainer_kw)
        trainer.run()
    return trainer, extra
