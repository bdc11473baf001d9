"""Do verl's other policy losses (``algorithm.policy_loss``) learn the needle demo as PPO's surrogate does?

For each seed, the demo's own data and warm start (``memrl demo --seed S --out WORK/needle_seedS``, reused
when they exist), then the demo's RL stage with each policy loss in its own folder (``rl_loss_<name>``),
everything else as the demo has it (40 steps, 8 prompts x 8 episodes, Adam at the demo's learning rate).
Prints held-out accuracy before -> after (the demo's measure: 64 held-out documents ~3x longer than any
training one, greedy) per run, and the min / median lift per loss. A finished run is read back, not rerun.

The clip range is the demo's (0.2); on-policy (one update per batch) the ratio is 1 at the update, so the
clip never binds here and the losses differ by their gradient's weighting (per sequence for GSPO,
stop-gradient ratio for CISPO). Settings a loss needs are those of verl's recipes (``SETTINGS``: DPPO's
thresholds; DRO's beta, which has no default).

    python bench/policy_losses.py --seeds 0 1 2 --losses vanilla gspo cispo
    python bench/policy_losses.py --seeds 0 1 2 --losses dppo_tv dppo_kl dro clip_cov kl_cov
    python bench/policy_losses.py --seeds 0 1 2 --mini-batches 4 --losses vanilla gspo cispo dppo_tv dro kl_cov
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any


# algorithm settings per loss: verl's DPPO recipe (examples/dppo_trainer) clips at 0.15 (TV) / 0.05 (KL);
# DRO's beta has no default in verl (1.0: the penalty's curvature equals a unit advantage's slope at log r = 1)
SETTINGS: dict[str, dict[str, float]] = {
    "dppo_tv": {"clip_ratio_low": 0.15, "clip_ratio_high": 0.15},
    "dppo_kl": {"clip_ratio_low": 0.05, "clip_ratio_high": 0.05},
    "dro": {"dro_beta": 1.0},
}


def run_tag(loss: str, mini_batches: int) -> str:
    """A run's name: the loss, and ``_mb<N>`` when each step's batch is split into N updates."""
    return loss if mini_batches == 1 else f"{loss}_mb{mini_batches}"


def run_dir(work: Path, seed: int, loss: str, mini_batches: int) -> Path:
    """A run's folder; vanilla PPO with one update per step is the demo's own RL stage (``rl``)."""
    own = loss == "vanilla" and mini_batches == 1
    return work / f"needle_seed{seed}" / ("rl" if own else f"rl_loss_{run_tag(loss, mini_batches)}")


def run_one(work: Path, seed: int, loss: str, mini_batches: int = 1) -> dict[str, Any]:
    from rich.console import Console

    from memrl.config import MemRLConfig
    from memrl.models.resolve import load_model
    from memrl.train.trainer import Trainer
    from memrl_demo.run import accuracy, deterministic, rl_config, run_demo, warm_start

    out = work / f"needle_seed{seed}"
    tag = run_tag(loss, mini_batches)
    done = out / f"summary_loss_{tag}.json"
    if done.is_file():
        return json.loads(done.read_text())
    console = Console(stderr=True, width=160)
    if not (out / "summary.json").is_file():  # the demo itself (vanilla PPO): its data, warm start and GRPO run
        run_demo(out, seed=seed, console=console)
    if run_dir(work, seed, loss, mini_batches).name == "rl":  # the demo's own RL stage is this run
        demo = json.loads((out / "summary.json").read_text())
        return {"seed": seed, "loss": loss, "loss_agg_mode": "token-mean", **{k: demo[k] for k in
                ("heldout_before", "heldout_after", "lift")}}
    with deterministic(seed):
        sft_dir, tok, paths, held = warm_start(out, seed, console)
        before = asyncio.run(accuracy(load_model(str(sft_dir), device="cpu"), tok, held))
        raw = rl_config(out, sft_dir, paths, 40, seed, _scale(), None).model_dump(mode="json")
        raw["algorithm"].update(policy_loss=loss, **SETTINGS.get(loss, {}))
        raw["algorithm"].pop("loss_agg_mode")  # the demo's token-mean, or the loss's own (GSPO: per sequence)
        raw["trainer"].update(output_dir=str(run_dir(work, seed, loss, mini_batches)), mini_batches=mini_batches)
        cfg = MemRLConfig.model_validate(raw)
        trainer = Trainer(cfg, tracker_console=console)
        trainer.run()
        after = asyncio.run(accuracy(trainer.policy, tok, held))
    summary = {"seed": seed, "loss": loss, "mini_batches": mini_batches, "settings": SETTINGS.get(loss, {}),
               "loss_agg_mode": cfg.algorithm.loss_agg_mode,
               "heldout_before": before, "heldout_after": after, "lift": after - before}
    done.write_text(json.dumps(summary, indent=2))
    return summary


def curve(run: Path) -> tuple[str, float]:
    """The trainer's held-out evals (every 10 steps, 32 documents) and the mean training reward of steps 1-20."""
    from memrl.io.metrics import read_metrics

    rows = read_metrics(run)
    evals = " / ".join(f"{r['eval/accuracy']:.0f}" for r in rows if r["step"] in (10, 20, 30, 40) and
                       "eval/accuracy" in r)
    early = [r["reward"] for r in rows if 1 <= r["step"] <= 20 and "reward" in r]
    return evals, statistics.fmean(early)


def _scale() -> Any:
    from memrl_demo.run import DemoScale

    return DemoScale()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--losses", nargs="+", default=["vanilla", "gspo", "cispo"])
    ap.add_argument("--work", type=Path, default=Path("runs/policy_losses"))
    ap.add_argument("--mini-batches", type=int, default=1, help="updates per step (trainer.mini_batches): from "
                    "the second on, the ratio is no longer 1 and the losses differ")
    args = ap.parse_args()
    rows = [run_one(args.work, s, loss, args.mini_batches) for s in args.seeds for loss in args.losses]
    print("| seed | policy_loss | aggregation | held-out before -> after | lift | trainer's eval at steps 10/20/30/40 "
          "| mean training reward, steps 1-20 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        evals, early = curve(run_dir(args.work, r["seed"], r["loss"], args.mini_batches))
        given = ", ".join(f"{k}={v}" for k, v in SETTINGS.get(r["loss"], {}).items())
        print(f"| {r['seed']} | {r['loss']}{f' ({given})' if given else ''} | {r['loss_agg_mode']} | {r['heldout_before']:.1f}% -> "
              f"{r['heldout_after']:.1f}% | {r['lift']:+.1f} | {evals} | {early:.3f} |")
    for loss in args.losses:
        lifts = [r["lift"] for r in rows if r["loss"] == loss]
        print(f"{loss}: lift min {min(lifts):+.1f} / median {statistics.median(lifts):+.1f} over seeds "
              f"{' '.join(str(s) for s in args.seeds)}")


if __name__ == "__main__":
    main()
