"""The needle demo's GRPO stage alone at several learning rates, on the warm starts of bench/demo_seeds.py.

Reads ``WORK/needle_seedS/sft_model`` and its data (written by ``bench/demo_seeds.py --work WORK``),
trains ``--steps`` GRPO steps per learning rate into ``WORK/needle_seedS/rl_lr<LR>`` (no in-training
eval) and prints held-out accuracy after each, with the mean reward of the first and last five steps.

    python bench/demo_seeds.py --seeds 0 1 2 3 4 --work runs/demo_seeds
    python bench/demo_lr_sweep.py --work runs/demo_seeds --seeds 0 1 2 3 4 --lrs 3e-4 5e-4 1e-3
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from memrl.config import MemRLConfig
from memrl.data import read_samples
from memrl_demo.run import DemoScale, accuracy, build_data, deterministic, rl_config
from memrl.models.resolve import load_tokenizer
from memrl.train.trainer import Trainer


def grpo_only(folder: Path, seed: int, lr: float, steps: int) -> tuple[float, float, float]:
    """(held-out accuracy after, mean reward of the first 5 steps, of the last 5)."""
    with deterministic(seed):
        paths = build_data(folder, seed)
        sft_dir = folder / "sft_model"
        tok = load_tokenizer(str(sft_dir))
        held = list(read_samples(paths["heldout"]))
        cfg = rl_config(folder, sft_dir, paths, steps, seed, DemoScale(), None).model_dump()
        out = folder / f"rl_lr{lr:g}"
        cfg["trainer"].update(lr=lr, output_dir=str(out), eval={"every": 0}, save_every=steps)
        trainer = Trainer(MemRLConfig.model_validate(cfg))
        trainer.run()
        after = asyncio.run(accuracy(trainer.policy, tok, held))
    rewards = [r["reward"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in r]
    return after, sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("runs/demo_seeds"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--lrs", type=float, nargs="+", default=[3e-4, 5e-4, 1e-3])
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    for seed in args.seeds:
        folder = args.work / f"needle_seed{seed}"
        if not (folder / "sft_model" / "config.json").is_file():
            raise SystemExit(f"{folder}/sft_model: run bench/demo_seeds.py --work {args.work} first")
        for lr in args.lrs:
            after, first, last = grpo_only(folder, seed, lr, args.steps)
            print(f"seed {seed}  lr {lr:g}  held-out after {after:5.1f}%  reward first 5 steps {first:.2f}, "
                  f"last 5 {last:.2f}", flush=True)


if __name__ == "__main__":
    main()
