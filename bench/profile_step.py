"""Where a training step of the TRL side-by-side spends its time and memory.

Usage::

    .venv/bin/python bench/profile_step.py [--steps 2] [--vocab 0] [--top 25] [--phase rollout|update|all]

Builds the same model, prompts and trainer as ``bench/peer_trl.py`` (memrl side only), then:

* RSS after each phase: imports, trainer built (model, optimizer, engine), each step's
  rollout and update; the process's peak RSS (``ru_maxrss``) is printed next to it, because
  a phase can raise the peak and give the memory back before its end;
* a cProfile of the last step's rollout and update (cumulative time, ``--top`` functions),
  and the HF engine's batch sizes (a rollout split into several batches decodes serially).

Profiles are of wall time under cProfile's overhead: read them as shares, not absolute times.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def rss_mib() -> tuple[float, float]:
    """(current RSS, peak RSS so far) of this process in MiB."""
    import psutil

    return psutil.Process().memory_info().rss / 2**20, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(label: str) -> None:
    now, peak = rss_mib()
    print(f"{label:32} RSS {now:8.0f} MiB   peak {peak:8.0f} MiB", flush=True)


def profiled(fn, top: int, enabled: bool):  # type: ignore[no-untyped-def]
    """Run ``fn()``; with ``enabled`` print its ``top`` functions by cumulative time."""
    if not enabled:
        return fn()
    prof = cProfile.Profile()
    out = prof.runcall(fn)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    print(buf.getvalue())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2, help="steps to run; the last one is profiled")
    p.add_argument("--vocab", type=int, default=0)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--phase", choices=("rollout", "update", "all", "none"), default="all")
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    report("start")
    import torch  # noqa: F401

    import peer_trl

    report("imports")
    with tempfile.TemporaryDirectory(prefix="profile_step_") as tmp:
        work = Path(tmp)
        model_dir, data = peer_trl.build(work, a.vocab, 64, 200)
        ns = argparse.Namespace(model=model_dir, data=data, workdir=work, steps=a.steps, prompts_per_step=8, group=8,
                                prompt_tokens=200, new_tokens=64, micro_batches=4, lr=1e-5,
                                checkpointing=False)
        report("model built and saved")
        trainer = peer_trl.memrl_trainer(ns)
        report("trainer built")
        for step in range(1, a.steps + 1):
            last = step == a.steps
            trainer.step += 1
            t0 = time.perf_counter()
            trainer.runner.tally = type(trainer.runner.tally)()
            stats0 = len(trainer.engine.stats.batch_sizes)
            trajs, _, _ = profiled(trainer.rollout, a.top, last and a.phase in ("rollout", "all"))
            t1 = time.perf_counter()
            print(f"step {step}: rollout {t1 - t0:.2f} s, engine batches {trainer.engine.stats.batch_sizes[stats0:]}")
            report(f"step {step} after rollout")
            from memrl.train.batch import rows_from_trajectories

            rows = rows_from_trajectories(trajs)
            trainer.advantages(trajs, rows)
            t2 = time.perf_counter()
            profiled(lambda: trainer.update(rows), a.top, last and a.phase in ("update", "all"))
            print(f"step {step}: update {time.perf_counter() - t2:.2f} s ({len(rows)} rows)")
            report(f"step {step} after update")
        trainer.tracker.close()


if __name__ == "__main__":
    main()
