"""On-policy distillation on the needle demo: the GRPO-trained demo model teaches a fresh warm-started student.

Per seed, in ``WORK/needle_seedS`` (the folder ``bench/turn_credit.py`` uses):

1. the demo's GRPO run (``memrl demo --seed S --out WORK/needle_seedS``) if its summary.json is missing;
2. the teacher: that run's last checkpoint (``rl/checkpoints/step_000040/model``) with the warm start's
   tokenizer files, copied to ``teacher_grpo/`` (a checkpoint's model folder holds no tokenizer);
3. the student: the same seed's warm start (``sft_model/``, the GRPO run's own starting point), trained
   with the demo's RL settings (same data, lr, 8 prompts x 8 episodes, 40 steps, eval every 10) but
   ``teacher.model=teacher_grpo`` (``teacher.mode`` replace by default: the per-token advantage is
   -(log pi_student - log pi_teacher) alone; the reward is still computed and logged) into ``rl_distill/``;
4. held-out accuracy (the demo's measure: 64 held-out documents, greedy) of the student before and after.

It prints, per seed, the student's held-out before -> after beside GRPO's from the same start (the
teacher's own run), the first step at 90% held-out (the trainer's eval on 32 documents, every 10 steps)
and the first step with training reward >= 0.9 for both.

    python bench/distill_demo.py --seeds 0 1 2
    python bench/distill_demo.py --seeds 0 --mode add     # distillation advantage added to GRPO's
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from turn_credit import GRPO, first_step, fmt_step, metrics, run_one  # noqa: E402


def teacher_dir(out: Path) -> Path:
    """The GRPO run's last checkpoint as a model folder with a tokenizer (made once)."""
    dest = out / "teacher_grpo"
    if (dest / "config.json").is_file():
        return dest
    last = sorted((out / "rl" / "checkpoints").glob("step_*"))[-1] / "model"
    tmp = out / "teacher_grpo.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(last, tmp)
    for f in (out / "sft_model").iterdir():
        if f.is_file() and not (tmp / f.name).exists():
            shutil.copy2(f, tmp / f.name)
    tmp.rename(dest)
    return dest


def distill(out: Path, seed: int, steps: int, mode: str, weight: float) -> dict[str, Any]:
    """Train the warm-started student against the teacher; returns (and writes) its summary."""
    from rich.console import Console

    from memrl.config import MemRLConfig
    from memrl.models.resolve import load_model
    from memrl.train.trainer import Trainer
    from memrl_demo.run import DemoScale, accuracy, deterministic, rl_config, warm_start

    name = "distill" if mode == "replace" else f"distill_{mode}"
    path = out / f"summary_{name}.json"
    if path.is_file():
        return json.loads(path.read_text())
    teacher = teacher_dir(out)
    console = Console(stderr=True, width=160)
    t0, c0 = time.perf_counter(), time.process_time()
    with deterministic(seed):
        sft_dir, tok, paths, held = warm_start(out, seed, console)
        before = asyncio.run(accuracy(load_model(str(sft_dir), device="cpu"), tok, held))
        raw = rl_config(out, sft_dir, paths, steps, seed, DemoScale(), None).model_dump(mode="json", exclude_unset=True)
        raw["teacher"] = {"model": str(teacher), "mode": mode, "weight": weight}
        raw["trainer"]["output_dir"] = str(out / f"rl_{name}")
        trainer = Trainer(MemRLConfig.model_validate(raw), tracker_console=console)
        trainer.run()
        after = asyncio.run(accuracy(trainer.policy, tok, held))
    summary = {"heldout_before": before, "heldout_after": after, "lift": after - before, "seed": seed,
               "teacher": str(teacher), "mode": mode, "weight": weight, "rl_steps": steps,
               "seconds": round(time.perf_counter() - t0, 1), "cpu_seconds": round(time.process_time() - c0, 1)}
    path.write_text(json.dumps(summary, indent=2))
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--work", type=Path, default=Path("runs/turn_credit"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--mode", default="replace", choices=("replace", "add"))
    ap.add_argument("--weight", type=float, default=1.0)
    args = ap.parse_args()
    print("| seed | teacher (GRPO) held-out | student start | distilled student after | GRPO after (same start) "
          "| steps to 90% held-out: distill / GRPO | reward >= 0.9: distill / GRPO | distill wall (CPU) s |\n"
          "|---|---|---|---|---|---|---|---|", flush=True)
    lifts: dict[str, list[float]] = {"distill": [], "grpo": []}
    for seed in args.seeds:
        out = args.work / f"needle_seed{seed}"
        g = run_one("needle", seed, GRPO, args.work)
        d = distill(out, seed, args.steps, args.mode, args.weight)
        name = "distill" if args.mode == "replace" else f"distill_{args.mode}"
        dm, gm = metrics(out / f"rl_{name}"), metrics(out / "rl")
        lifts["distill"].append(d["lift"]), lifts["grpo"].append(g["lift"])
        print(f"| {seed} | {g['heldout_after']:.1f}% | {d['heldout_before']:.1f}% | {d['heldout_after']:.1f}% | "
              f"{g['heldout_after']:.1f}% | {fmt_step(first_step(dm, 'eval/accuracy', 90.0))} / "
              f"{fmt_step(first_step(gm, 'eval/accuracy', 90.0))} | {fmt_step(first_step(dm, 'reward', 0.9))} / "
              f"{fmt_step(first_step(gm, 'reward', 0.9))} | {d['seconds']:.0f} ({d['cpu_seconds']:.0f}) |", flush=True)
    for k, v in lifts.items():
        print(f"lift {k}: min {min(v):+.1f} median {statistics.median(v):+.1f}")


if __name__ == "__main__":
    main()
