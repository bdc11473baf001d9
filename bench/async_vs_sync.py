"""Synchronous vs asynchronous training on the demo's task: learning curves, off-policy gauges, throughput.

The task is the demo's (MemAgent on the needle documents, warm-started tiny model; built in
``--work`` per seed on the first run and reused). Each run trains ``--steps`` steps of 8 prompts x
8 episodes, synchronously and with ``trainer.mode=async`` for every combination of ``--staleness``
η, ``--off-policy``, ``--partial`` and ``--lr``, over ``--seeds``. Per run it records (one JSON line
in ``--results``, appended, so a sweep can be run in pieces and summarised with ``--summary-only``):

* the learning curve: ``reward`` of the episodes *trained* at each step (the same quantity in both
  modes), against trained samples (every step trains the same number);
* the off-policy gauges, token-weighted over the run: behaviour importance weight
  ``exp(prox - behav)`` (``is_weight_mean``), the share of tokens over the cap
  (``is_capped_frac``), the mean ``prox - behav`` log-ratio (``behav_kl``) and the mean
  ``|engine - trainer|`` log-prob gap (``logprob_mismatch``, logged in every mode);
* the staleness mix of the trained episodes and the producer's idle share;
* wall time, trained tokens/s and the time split; with ``--heldout K`` the greedy held-out
  accuracy of the final policy on the first K held-out documents.

On a 2-core CPU, generation and the update compete for the same cores, so overlap buys little
here; ``bench/async_modelled.py`` measures the overlap with a modelled decode time.

    python bench/async_vs_sync.py --seeds 0 1 2 --staleness 1 --lr 1e-3 3e-4 --steps 16
    python bench/async_vs_sync.py --summary-only --results runs/bench_async/results.jsonl
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

GAUGES = ("is_weight_mean", "is_capped_frac", "behav_kl", "logprob_mismatch")


@dataclass(frozen=True)
class Spec:
    """One training run of the sweep; ``eta=None`` is the synchronous trainer."""

    seed: int
    lr: float
    eta: int | None
    off_policy: str = "none"
    partial: str = "interrupt"
    chunk: int = 32
    cap: float | None = None
    steps: int = 12
    replicas: int = 0

    @property
    def name(self) -> str:
        if self.eta is None:
            return f"sync_lr{self.lr:g}_s{self.seed}_r{self.replicas}"
        cap = f"_cap{self.cap:g}" if self.cap else ""
        return (f"async{self.eta}_{self.off_policy}{cap}_{self.partial}{self.chunk}_lr{self.lr:g}_s{self.seed}"
                f"_r{self.replicas}")

    @property
    def label(self) -> str:
        if self.eta is None:
            return "sync"
        cap = f" cap {self.cap:g}" if self.cap else ""
        return f"η={self.eta} {self.off_policy}{cap} {self.partial}"


def build_config(spec: Spec, work: Path) -> Any:
    """The demo's GRPO config at ``spec``'s seed, lr and mode (metrics only: no eval, no checkpoints)."""
    from memrl.config import MemRLConfig
    from memrl_demo.run import DemoScale, rl_config, warm_start

    scale = DemoScale()
    sft_dir, _, paths, _ = warm_start(work / f"seed{spec.seed}", spec.seed, Console(stderr=True, quiet=True), scale)
    raw = rl_config(work / "bench", sft_dir, paths, spec.steps, spec.seed, scale, spec.eta).model_dump(mode="json")
    raw["trainer"].update(output_dir=str(work / "bench" / spec.name), eval={"every": 0}, save_every=10_000,
                          rollouts_every=0, lr=spec.lr)
    if spec.eta is not None:
        raw["trainer"]["async"].update(partial_rollouts=spec.partial, partial_chunk_tokens=spec.chunk)
        # the spec names its correction: the async default (bypass mode, dumped into raw above) must not stay on
        raw["algorithm"].update(off_policy=spec.off_policy, behav_imp_weight_cap=spec.cap)
        raw["algorithm"]["rollout_correction"]["bypass_mode"] = False
    if spec.replicas:
        raw["cluster"] = {"rollout_replicas": spec.replicas, "replica_cpus": 1}
    return MemRLConfig.model_validate(raw)


def summarise(rows: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    """The run's numbers from its per-step metrics (``rows``: the steps that trained)."""
    tokens = sum(r["train_tokens"] for r in rows)
    weights = [r.get("train_tokens", 0.0) for r in rows]
    out: dict[str, Any] = {
        "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
        "rollout_s": sum(r.get("time/rollout", 0.0) for r in rows),
        "update_s": sum(r.get("time/update", 0.0) + r.get("time/logprob", 0.0) for r in rows),
        "sync_s": sum(r.get("time/sync", 0.0) for r in rows),
        "rewards": [round(r.get("reward", float("nan")), 4) for r in rows],
        "stale": {}, "idle": None,
    }
    later = rows[1:]
    if later and all("time/step" in r for r in later):  # steady state: the first step (no overlap possible) left out
        out["steady_tok_s"] = sum(r["train_tokens"] for r in later) / max(sum(r["time/step"] for r in later), 1e-9)
    for key in GAUGES:
        pairs = [(r[key], w) for r, w in zip(rows, weights) if key in r]
        if pairs:
            out[key] = sum(v * w for v, w in pairs) / max(sum(w for _, w in pairs), 1e-9)
            out[f"{key}_max"] = max(v for v, _ in pairs)
    for r in rows:
        for key, val in r.items():
            if key.startswith("async/staleness_") and key[16:].isdigit():
                out["stale"][key[16:]] = out["stale"].get(key[16:], 0.0) + val
    if any("async/producer_idle" in r for r in rows):
        out["idle"] = statistics.fmean(r.get("async/producer_idle", 0.0) for r in rows)
    return out


def run_one(spec: Spec, work: Path, heldout: int) -> dict[str, Any]:
    from memrl.train.trainer import Trainer
    from memrl_demo.run import accuracy, deterministic, warm_start

    with deterministic(spec.seed):
        cfg = build_config(spec, work)
        shutil.rmtree(cfg.trainer.output_dir, ignore_errors=True)
        trainer = Trainer(cfg, tracker_console=Console(stderr=True, quiet=True))
        t0 = time.perf_counter()
        trainer.run()
        wall = time.perf_counter() - t0
        if trainer.pool is not None:
            import asyncio

            asyncio.run(trainer.pool.close())
        acc = None
        if heldout:
            import asyncio

            _, tok, _, held = warm_start(work / f"seed{spec.seed}", spec.seed, Console(stderr=True, quiet=True))
            acc = asyncio.run(accuracy(trainer.policy, tok, held[:heldout]))
    rows = [json.loads(x) for x in (Path(cfg.trainer.output_dir) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "train_tokens" in r]
    return {"spec": asdict(spec), "name": spec.name, "label": spec.label, "heldout": acc, **summarise(rows, wall)}


def _fmt(x: float | None, pat: str = "{:.3f}") -> str:
    return "-" if x is None else pat.format(x)


def print_tables(results: list[dict[str, Any]]) -> None:
    """Per (lr, setting): mean over seeds of the curve's last third, gauges, staleness; then the curves."""
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["spec"]["lr"], r["label"]), []).append(r)
    print("| lr | run | seeds | reward, last third (mean ± sd over seeds) | held-out % | is weight | capped | "
          "behav kl | abs(engine - trainer) | staleness 0/1/2 | trained tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (lr, label), rs in sorted(groups.items(), key=lambda kv: (-kv[0][0], kv[0][1] != "sync", kv[0][1])):
        tails = [statistics.fmean(r["rewards"][-max(1, len(r["rewards"]) // 3):]) for r in rs]
        sd = statistics.stdev(tails) if len(tails) > 1 else 0.0
        held = [r["heldout"] for r in rs if r.get("heldout") is not None]
        stale = {k: sum(r["stale"].get(k, 0.0) for r in rs) for k in ("0", "1", "2")}
        total = sum(stale.values()) or 1.0
        mix = "/".join(f"{100 * v / total:.0f}%" for v in stale.values()) if any(stale.values()) else "-"

        def mean(key: str) -> float | None:
            vals = [r[key] for r in rs if key in r]
            return statistics.fmean(vals) if vals else None
        print(f"| {lr:g} | {label} | {','.join(str(r['spec']['seed']) for r in rs)} | "
              f"{statistics.fmean(tails):.3f} ± {sd:.3f} | {_fmt(statistics.fmean(held) if held else None, '{:.1f}')} | "
              f"{_fmt(mean('is_weight_mean'))} | {_fmt(mean('is_capped_frac'), '{:.4f}')} | "
              f"{_fmt(mean('behav_kl'), '{:.4f}')} | {_fmt(mean('logprob_mismatch'), '{:.4f}')} | {mix} | "
              f"{statistics.fmean(r['tok_s'] for r in rs):.0f} |")
    print("\nreward of the trained episodes per step (each step trains 8 prompts x 8 episodes):")
    for r in sorted(results, key=lambda r: (-r["spec"]["lr"], r["label"] != "sync", r["label"], r["spec"]["seed"])):
        print(f"  lr {r['spec']['lr']:<6g} {r['label']:>28} s{r['spec']['seed']}: "
              + " ".join(f"{x:.2f}" for x in r["rewards"]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("runs/bench_async"), help="demo data, models and runs")
    p.add_argument("--results", type=Path, default=None, help="JSON lines, appended (default WORK/results.jsonl)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--lr", type=float, nargs="+", default=[3e-4])
    p.add_argument("--staleness", type=int, nargs="+", default=[1], help="η of the asynchronous runs")
    p.add_argument("--off-policy", nargs="+", default=["decoupled"], choices=["none", "decoupled", "tis"])
    p.add_argument("--partial", nargs="+", default=["interrupt"], choices=["finish", "interrupt"])
    p.add_argument("--chunk", type=int, default=2, help="trainer.async.partial_chunk_tokens for interrupt (the demo's "
                   "memory turns are 4 tokens: 2 lets an update land inside one)")
    p.add_argument("--cap", type=float, default=None, help="algorithm.behav_imp_weight_cap (decoupled)")
    p.add_argument("--replicas", type=int, default=0, help="0: the in-process engine; R: R Ray replicas")
    p.add_argument("--no-sync", action="store_true", help="skip the synchronous baseline runs")
    p.add_argument("--heldout", type=int, default=0, help="greedy held-out accuracy on this many documents")
    p.add_argument("--summary-only", action="store_true", help="print the tables of --results and stop")
    args = p.parse_args()
    results_path = args.results or args.work / "results.jsonl"
    if not args.summary_only:
        results_path.parent.mkdir(parents=True, exist_ok=True)
        specs = []
        for seed in args.seeds:
            for lr in args.lr:
                if not args.no_sync:
                    specs.append(Spec(seed, lr, None, steps=args.steps, replicas=args.replicas))
                specs += [Spec(seed, lr, eta, off, part, args.chunk, args.cap if off == "decoupled" else None,
                               args.steps, args.replicas)
                          for eta in args.staleness for off in args.off_policy for part in args.partial]
        for spec in specs:
            res = run_one(spec, args.work, args.heldout)
            with results_path.open("a") as fh:
                fh.write(json.dumps(res) + "\n")
            print(f"{spec.name}: {res['wall_s']:.0f}s " + " ".join(f"{x:.2f}" for x in res["rewards"]),
                  file=sys.stderr, flush=True)
    results = [json.loads(x) for x in results_path.read_text().splitlines() if x.strip()]
    print_tables(results)


if __name__ == "__main__":
    main()
