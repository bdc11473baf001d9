"""Synchronous vs asynchronous training on the same task and the same number of trained samples.

The task is the demo's (MemAgent on the needle documents, warm-started tiny model; built in
``--work`` on the first run and reused). Each run trains ``--steps`` steps of 8 prompts x 8
episodes, synchronously and with ``trainer.mode=async`` at each ``--staleness`` η, on the
in-process engine and (``--replicas 2``) on Ray replicas. Prints, per run: wall time, trained
tokens/s and the speed-up over the synchronous run on the same engine, the time split (waiting
for rollouts, update, weight sync), the share of trained episodes per staleness, the producer's
idle share, and the reward curve against trained samples (the learning curves, to judge
whether async learns as well per sample).

On a 2-core CPU, generation and the update compete for the same cores, so overlap buys
little; on a GPU with a separate engine (vLLM) the update and rollouts run on different
hardware. Report what this prints.

    python bench/async_vs_sync.py --steps 12 --staleness 1 2 --replicas 0 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console


def run_one(work: Path, steps: int, staleness: int | None, replicas: int, seed: int, off_policy: str) -> dict:
    from memrl_demo.run import DemoScale, rl_config, warm_start
    from memrl.train.trainer import Trainer

    console = Console(stderr=True, quiet=True)
    scale = DemoScale()
    sft_dir, _, paths, _ = warm_start(work, seed, console, scale)
    name = f"{'sync' if staleness is None else f'async{staleness}'}_r{replicas}"
    cfg = rl_config(work / "bench", sft_dir, paths, steps, seed, scale, staleness)
    raw = cfg.model_dump(mode="json")
    raw["trainer"].update(output_dir=str(work / "bench" / name), eval_every=0, save_every=10_000, rollouts_every=0)
    if staleness is not None:
        raw["algorithm"]["off_policy"] = off_policy
    if replicas:
        raw["cluster"] = {"rollout_replicas": replicas, "replica_cpus": 1}
    from memrl.config import MemRLConfig

    cfg = MemRLConfig.model_validate(raw)
    import shutil

    shutil.rmtree(cfg.trainer.output_dir, ignore_errors=True)
    trainer = Trainer(cfg, tracker_console=console)
    t0 = time.perf_counter()
    trainer.run()
    wall = time.perf_counter() - t0
    if trainer.pool is not None:
        import asyncio

        asyncio.run(trainer.pool.close())
    rows = [json.loads(x) for x in (Path(cfg.trainer.output_dir) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "train_tokens" in r]
    tokens = sum(r["train_tokens"] for r in rows)
    wait_key = "time/rollout"
    out = {"name": name, "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
           "rollout_s": sum(r.get(wait_key, 0.0) for r in rows),
           "update_s": sum(r.get("time/update", 0.0) + r.get("time/logprob", 0.0) for r in rows),
           "sync_s": sum(r.get("time/sync", 0.0) for r in rows),
           "rewards": [round(r.get("reward", float("nan")), 3) for r in rows]}
    if staleness is not None:
        out["stale"] = {k: sum(r.get(f"async/staleness_{k}", 0.0) for r in rows) for k in range(staleness + 1)}
        out["idle"] = statistics.fmean(r.get("async/producer_idle", 0.0) for r in rows)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("runs/bench_async"), help="demo data, model and runs")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--staleness", type=int, nargs="+", default=[1, 2])
    p.add_argument("--replicas", type=int, nargs="+", default=[0, 2], help="0: the in-process engine")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--off-policy", default="decoupled", choices=["none", "decoupled", "tis"],
                   help="algorithm.off_policy of the asynchronous runs")
    args = p.parse_args()
    results = []
    for replicas in args.replicas:
        for eta in [None, *args.staleness]:
            res = run_one(args.work, args.steps, eta, replicas, args.seed, args.off_policy)
            results.append(res)
            print(json.dumps(res), file=sys.stderr, flush=True)
    print(f"\n{args.steps} steps x 8 prompts x 8 MemAgent episodes each; trained tokens = generated tokens of "
          f"the episodes trained on; async runs with algorithm.off_policy={args.off_policy}\n")
    print("| run | engine | wall s | trained tok/s | vs sync | waiting for rollouts s | update s | sync s | "
          "staleness 0/1/2 (episodes) | producer idle |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base: dict[str, float] = {}
    for r in results:
        engine = "in-process HF" if r["name"].endswith("_r0") else f"{r['name'].split('_r')[1]} Ray replicas"
        if r["name"].startswith("sync"):
            base[engine] = r["tok_s"]
        stale = "/".join(f"{r['stale'][k]:.0f}" for k in sorted(r["stale"])) if "stale" in r else "-"
        idle = f"{100 * r['idle']:.0f}%" if "idle" in r else "-"
        print(f"| {r['name'].split('_r')[0]} | {engine} | {r['wall_s']:.1f} | {r['tok_s']:.1f} | "
              f"{r['tok_s'] / base[engine]:.2f}x | {r['rollout_s']:.1f} | {r['update_s']:.1f} | {r['sync_s']:.1f} | "
              f"{stale} | {idle} |")
    print("\nreward per step (the learning curve; every step trains the same number of samples):")
    for r in results:
        print(f"  {r['name']:>10}: " + " ".join(f"{x:.2f}" for x in r["rewards"]))


if __name__ == "__main__":
    main()
