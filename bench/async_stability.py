"""Is asynchronous training as stable as synchronous? The demo's RL stage over seeds, corrections and numerics.

Each run is the demo's GRPO stage exactly (``memrl_demo.run.rl_config``: 40 steps, lr 3e-4, held-out
eval every 10 steps) after the demo's warm start for that seed (built once in ``--work`` and reused),
in one of these variants:

* ``sync``: the synchronous trainer;
* ``async-none``: η = 1 with no off-policy correction (the asynchronous default before 2026-11-28);
* ``async-decoupled``: AReaL's decoupled objective (``algorithm.off_policy=decoupled``);
* ``async``: η = 1 with whatever ``trainer.mode=async`` defaults to now (PPO clipped against the behaviour policy);
* ``async-bypass``: PPO clipped against the engine's (behaviour) log-probs (verl's bypass mode, ppo_clip);
* ``async-rc``: verl's rollout correction (token TIS at 2 + geometric-mean rejection).

``--threads`` varies the numerics (torch's intra-op thread count can change reduction order, as another
machine's CPU does; on the 2-core machine the demo was built on, 1, 2 and 4 threads gave bit-identical
weights), and ``--perturb K`` shifts the RL stage's sampling seed by K (same warm start, different
draws): a run that only succeeds for one draw is fragile. Per run it prints the eval curve (accuracy at steps 0, 10, 20, 30, 40), the final
held-out accuracy and lift, and the mechanism gauges averaged over the steps: the behaviour log-ratio
``behav_kl`` (stale policy vs trainer), the importance weight mean, ``logprob_mismatch``, and the
largest per-step drop of the trained reward. One JSON line per run goes to ``--results``.

    python bench/async_stability.py --seeds 0 1 2 3 4 --variants sync async-none async --threads 2 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console

VARIANTS: dict[str, dict[str, Any]] = {
    "sync": {},
    "async-none": {"algorithm": {"off_policy": "none", "rollout_correction": {"bypass_mode": False}}},
    "async-decoupled": {"algorithm": {"off_policy": "decoupled", "rollout_correction": {"bypass_mode": False}}},
    "async": {},
    "async-bypass": {"algorithm": {"off_policy": "none", "rollout_correction": {
        "bypass_mode": True, "loss_type": "ppo_clip"}}},
    "async-rc": {"algorithm": {"off_policy": "none", "rollout_correction": {
        "bypass_mode": False, "rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "seq_mean_k1",
        "rollout_rs_threshold": "0.9_1.1"}}},
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        base[key] = _merge(dict(base.get(key) or {}), value) if isinstance(value, dict) else value
    return base


def run_one(work: Path, seed: int, variant: str, threads: int, steps: int, perturb: int = 0) -> dict[str, Any]:
    from memrl.config import MemRLConfig
    from memrl.train.trainer import Trainer
    from memrl_demo.run import accuracy, deterministic, rl_config, warm_start

    console = Console(stderr=True, quiet=True)
    out = work / f"seed{seed}"
    with deterministic(seed, threads):
        sft_dir, tok, paths, held = warm_start(out, seed, console)
        from memrl.models.resolve import load_model

        before = asyncio.run(accuracy(load_model(str(sft_dir), device="cpu"), tok, held))
        cfg = rl_config(out, sft_dir, paths, steps, seed, __import__("memrl_demo.run").run.DemoScale(),
                        None if variant == "sync" else 1)
        raw = _merge(cfg.model_dump(mode="json", by_alias=True), VARIANTS[variant])
        raw["trainer"]["output_dir"] = str(out / f"rl_{variant}_t{threads}_p{perturb}")
        raw["trainer"]["seed"] = seed + perturb
        trainer = Trainer(MemRLConfig.model_validate(raw), tracker_console=console)
        trainer.run()
        after = asyncio.run(accuracy(trainer.policy, tok, held))
    lines = [json.loads(x) for x in (Path(raw["trainer"]["output_dir"]) / "metrics.jsonl").read_text().splitlines()]
    return {**_summary(seed, variant, threads, before, after, lines, trainer.cfg.algorithm.off_policy),
            "perturb": perturb}


def _mean(lines: list[dict[str, Any]], key: str) -> float:
    vals = [m[key] for m in lines if isinstance(m.get(key), (int, float))]
    return statistics.fmean(vals) if vals else float("nan")


def _summary(seed: int, variant: str, threads: int, before: float, after: float, lines: list[dict[str, Any]],
             off_policy: str) -> dict[str, Any]:
    curve = {int(m["step"]): m["eval/accuracy"] for m in lines if "eval/accuracy" in m}
    rewards = [m["reward"] for m in lines if "reward" in m and m.get("step", 0) > 0]
    evals = [curve[k] for k in sorted(curve)]
    return {
        "seed": seed, "variant": variant, "threads": threads, "off_policy": off_policy,
        "heldout_before": before, "heldout_after": after, "lift": after - before,
        "eval_curve": evals, "worst_eval_drop": max([a - b for a, b in zip(evals, evals[1:])] + [0.0]),
        "reward_curve": rewards,
        "behav_kl": _mean(lines, "behav_kl"), "is_weight_mean": _mean(lines, "is_weight_mean"),
        "logprob_mismatch": _mean(lines, "logprob_mismatch"), "ppo_kl": _mean(lines, "ppo_kl"),
        "grad_norm_max": max((m.get("grad_norm", 0.0) for m in lines), default=0.0),
        "rs_masked": _mean(lines, "rollout_corr/rollout_rs_masked_fraction"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--variants", nargs="+", default=["sync", "async"], choices=sorted(VARIANTS))
    ap.add_argument("--threads", type=int, nargs="+", default=[2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--perturb", type=int, nargs="+", default=[0], help="offsets of the RL stage's seed")
    ap.add_argument("--work", type=Path, default=Path("runs/async_stability"))
    ap.add_argument("--results", type=Path, default=None, help="JSON lines (default WORK/results.jsonl)")
    args = ap.parse_args()
    results = args.results or args.work / "results.jsonl"
    results.parent.mkdir(parents=True, exist_ok=True)
    print("| seed | threads | perturb | variant | held-out before -> after | eval curve (steps 0,10,..) | worst eval drop "
          "| behav_kl | IS weight | mismatch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        for threads in args.threads:
            for perturb in args.perturb:
                for variant in args.variants:
                    _report(results, run_one(args.work, seed, variant, threads, args.steps, perturb))


def _report(results: Path, r: dict[str, Any]) -> None:
    """Append the run to the results file and print its table row."""
    with results.open("a") as fh:
        fh.write(json.dumps(r) + "\n")
    curve = " ".join(f"{x:.0f}" for x in r["eval_curve"])
    print(f"| {r['seed']} | {r['threads']} | {r['perturb']} | {r['variant']} | {r['heldout_before']:.1f} -> "
          f"{r['heldout_after']:.1f} ({r['lift']:+.1f}) | {curve} | {r['worst_eval_drop']:.1f} | {r['behav_kl']:.4f} "
          f"| {r['is_weight_mean']:.3f} | {r['logprob_mismatch']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
