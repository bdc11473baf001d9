"""Where a MemAgent GRPO step spends its time: episodes of several conversations on the HF engine.

Usage::

    .venv/bin/python bench/profile_memagent.py [--steps 2] [--chunks 3] [--top 20]

The model and prompt set of ``bench/peer_trl.py`` (a ~5M-parameter Qwen2), with
contexts of ``--chunks`` x 200 tokens read by the ``memagent`` workflow in
200-token chunks: ``--chunks`` memory turns and a final turn, so an episode has
``--chunks + 1`` conversations (4 by default). 4 prompts x 8 episodes per step.

Printed for the last step: rollout time split into engine batches (decode
thread) and the rest (workflow Python on the event loop), the engine's batch
sizes (each memory turn waits for the previous one, so an episode's turns are
serial batches), update time and rows, and cProfile's top functions of the
event-loop thread and of the update.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _top(prof: cProfile.Profile, n: int) -> str:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(n)
    return buf.getvalue()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2, help="steps to run; the last one is profiled")
    p.add_argument("--chunks", type=int, default=3, help="memory turns per episode (conversations = chunks + 1)")
    p.add_argument("--top", type=int, default=20)
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import peer_trl

    from memrl.config import MemRLConfig
    from memrl.train.batch import rows_from_trajectories
    from memrl.train.trainer import Trainer

    with tempfile.TemporaryDirectory(prefix="profile_memagent_") as tmp:
        work = Path(tmp)
        model_dir, data = peer_trl.build(work, 0, 32, 200 * a.chunks)
        cfg = MemRLConfig.model_validate({
            "model": {"path": str(model_dir), "dtype": "float32"},
            "data": {"train_file": str(data)},
            "workflow": {"name": "memagent", "chunk_tokens": 200, "memory_tokens": 64, "final_tokens": 32,
                         "max_chunks": a.chunks, "reward": "em"},
            "algorithm": {"n": 8, "kl_coef": 0.0, "ppo_epochs": 1, "loss_agg_mode": "token-mean"},
            "sampling": {"temperature": 1.0},
            "trainer": {"lr": 1e-5, "total_steps": a.steps + 1, "prompts_per_step": 4, "mini_batches": 1,
                        "micro_batch_tokens": 8192, "save_every": 10_000, "output_dir": str(work / "run"),
                        "seed": 0},
            "engine": {"kind": "hf", "device": "cpu", "max_batch_size": 64},
        })
        trainer = Trainer(cfg)
        engine: Any = trainer.engine
        decode_s = [0.0]
        real = engine._generate_batch

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                decode_s[0] += time.perf_counter() - t0

        engine._generate_batch = timed
        for step in range(1, a.steps + 1):
            last = step == a.steps
            trainer.step += 1
            decode_s[0] = 0.0
            seen = len(engine.stats.batch_sizes)
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            trajs, _, _ = prof.runcall(trainer.rollout) if last else trainer.rollout()
            roll = time.perf_counter() - t0
            convs = sum(len(t.conversations) for t in trajs)
            sizes = engine.stats.batch_sizes[seen:]
            print(f"step {step}: rollout {roll:.2f} s = engine batches {decode_s[0]:.2f} s + other "
                  f"{roll - decode_s[0]:.2f} s; {len(trajs)} episodes, {convs} conversations, "
                  f"{len(sizes)} engine batches of {sizes}", flush=True)
            if last:
                print(_top(prof, a.top))
            rows = rows_from_trajectories(trajs)
            trainer.advantages(trajs, rows)
            prof = cProfile.Profile()
            t1 = time.perf_counter()
            metrics = prof.runcall(trainer.update, rows) if last else trainer.update(rows)
            print(f"step {step}: update {time.perf_counter() - t1:.2f} s ({len(rows)} rows, "
                  f"{sum(len(r) for r in rows)} tokens; old-log-prob pass {metrics['time/logprob']:.2f} s)",
                  flush=True)
            if last:
                print(_top(prof, a.top))
        trainer.tracker.close()


if __name__ == "__main__":
    main()
