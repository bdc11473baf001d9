"""The overlap gain of asynchronous training where the hardware cannot hide it: a modelled decode time.

On a 2-core CPU the engine and the update compete for the same cores, so async cannot overlap
them (``bench/async_vs_sync.py``: 0.75-1.0x). On real hardware the engine runs on devices of
its own. This bench models that:

1. ``calibrate``: time a real engine (the in-process HF engine serving ``--calib-model``,
   SmolLM2-135M by default) on the demo's request shape: ``--concurrency`` requests at once
   of a ~``--prompt-tokens`` prompt, for several new-token counts n, and fit the per-request
   latency ``L(n) = a + b * n`` by least squares (``a``: queueing + prefill, ``b``: one batched
   decode step). The fit is written to ``WORK/latency.json``.
2. ``run``: train the demo task synchronously and asynchronously (η = ``--staleness``, lr 3e-4,
   ``decoupled``) with a :class:`~modelled_engine.ModelledLatencyEngine`: the real tiny policy
   generates every token (so the learning is real) in an engine process of its own
   (``--engine process``, pinned to one core), and each request then *sleeps* in the trainer's
   event loop until ``L(n)`` has passed since it started. The update runs alone on the other core
   (the trainer's accelerator). The weights are pushed to the engine process after every step.
   ``--engine thread`` keeps the engine in the trainer's process (it then shares the
   interpreter lock with the update); ``--engine replica`` uses a memrl Ray rollout replica.
   See :mod:`modelled_engine` for exactly what runs where.

The latency model used by ``run`` is ``--a-s`` + ``--b-ms`` per token. By default ``b`` is
*balanced*: two synchronous probes as long as the measured runs (the update gets faster over
the first steps) measure this machine's update time per step and the wait for rollouts at two
values of ``b``, and ``b`` is set where the line through them meets the update, so that the
modelled generation of a step (~5 sequential model calls of 4-8 tokens) takes as long: the regime
a disaggregated setup is sized for, on a fast or a loaded machine alike (a fixed ``b`` gives a
different regime on each). ``--b-ms 60`` fixes it; ``--fit WORK/latency.json`` uses the calibrated
line. The speed-up of perfect overlap is (G + T) / max(G, T) for generation G and update T per
step (2x at G = T); the time split it prints says which regime a run was in.

It prints, per run, trained tokens/s, the async/sync ratio against the same seed's synchronous
run over the whole run and in the steady state (steps 2..N, from each step's ``time/step``: the
first step cannot overlap anything in either mode), the time split (trainer waiting for rollouts, update, weight sync); per η the ratio's min and
median over seeds; and the learning curves (reward of the trained episodes) against the
synchronous runs' seed-to-seed band. ``summary`` prints the tables of a results file again.

    python bench/async_modelled.py calibrate                                   # SmolLM2-135M, one core
    python bench/async_modelled.py calibrate --calib-model runs/bench_async/seed0/sft_model
    python bench/async_modelled.py run --seeds 0 1 2 --staleness 1 2 --steps 12
    python bench/async_modelled.py summary --results runs/bench_async/modelled.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))

from async_vs_sync import Spec, build_config, summarise  # noqa: E402
from modelled_engine import ModelledLatencyEngine, RolloutHost, pin_cores  # noqa: E402


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


async def _time_requests(engine: Any, concurrency: int, prompt: list[int], n: int) -> list[float]:
    from memrl.engines.base import SamplingParams

    async def one(k: int) -> float:
        t0 = time.perf_counter()
        res = await engine.generate(prompt, SamplingParams(temperature=1.0, max_new_tokens=n, seed=k))
        assert len(res.token_ids) == n
        return time.perf_counter() - t0

    return list(await asyncio.gather(*(one(k) for k in range(concurrency))))


def calibrate(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the real engine at the demo's concurrency and fit ``L(n) = a + b n`` (per request)."""
    import torch

    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model

    torch.set_num_threads(args.threads)
    model = load_model(args.calib_model, device="cpu")
    engine = HFEngine(model, pad_token_id=0, max_batch_size=args.concurrency, seed=0)
    prompt = [(7 * i) % 1000 + 10 for i in range(args.prompt_tokens)]
    asyncio.run(_time_requests(engine, 4, prompt, 2))  # warm-up
    xs, ys = [], []
    for n in args.new_tokens:
        for _ in range(args.repeats):
            lat = asyncio.run(_time_requests(engine, args.concurrency, prompt, n))
            xs.append(float(n))
            ys.append(statistics.fmean(lat))
            print(f"n={n:>3}: mean request latency {ys[-1]:.3f} s ({args.concurrency} at once)", file=sys.stderr)
    a, b = fit_line(xs, ys)
    fit = {"a_s": a, "b_s_per_token": b, "model": args.calib_model, "concurrency": args.concurrency,
           "prompt_tokens": args.prompt_tokens, "threads": args.threads, "points": list(zip(xs, ys))}
    out = args.work / "latency.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fit, indent=1))
    print(f"L(n) = {a:.3f} s + {1000 * b:.1f} ms x n  (fitted on {len(xs)} runs; written to {out})")
    return fit


def run_one(spec: Spec, work: Path, a: float, b: float, where: str = "process",
            pin: tuple[int, int] | None = None, inflight: int | None = None) -> dict[str, Any]:
    """One training run on the demo task with the modelled engine: its summary, the engine's modelled busy
    seconds and how far its real compute overran the model.

    ``where``: the real engine in a rollout replica of its own (``replica``) or in the trainer's process
    (``thread``), see :mod:`modelled_engine`. ``pin``: (engine core, trainer core), one thread of torch each;
    both modes of a comparison run under the same split."""
    import shutil

    from memrl.train.trainer import Trainer
    from memrl_demo.run import DEMO_THREADS, deterministic

    with deterministic(spec.seed, threads=1 if pin else DEMO_THREADS):
        cfg = build_config(spec, work)
        if inflight:
            cfg.engine.concurrency = inflight
        shutil.rmtree(cfg.trainer.output_dir, ignore_errors=True)
        host = RolloutHost(cfg, where, pin)
        try:
            engine = ModelledLatencyEngine(host.engine, a, b)
            trainer = Trainer(cfg, engine=engine, tracker_console=Console(stderr=True, quiet=True))
            host.attach(trainer)
            t0 = time.perf_counter()
            trainer.run()
            wall = time.perf_counter() - t0
        finally:
            host.close()
    rows = [json.loads(x) for x in (Path(cfg.trainer.output_dir) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "train_tokens" in r]
    return {"spec": spec.__dict__, "label": spec.label, "engine": where, "pinned": bool(pin), "a_s": a, "b_s": b,
            "modelled_engine_s": engine.busy_s, "overrun_s": engine.overrun_s, **summarise(rows, wall)}


def _probe(args: argparse.Namespace, pin: tuple[int, int] | None, seed: int, b: float) -> tuple[float, float]:
    """(wait for rollouts, update) seconds per step of a synchronous run at ``b`` seconds per token."""
    spec = Spec(seed, args.lr, None, "none", "interrupt", 32, steps=args.probe_steps or args.steps)
    probe = run_one(spec, args.work, args.a_s, b, args.engine, pin, args.inflight)
    steps = max(1, len(probe["rewards"]))
    return probe["rollout_s"] / steps, probe["update_s"] / steps


def solve_b(b0: float, g0: float, b1: float, g1: float, t: float) -> float:
    """``b`` at which the line through the two probes (b0, g0) and (b1, g1) reaches the update time ``t``: the
    wait is a fixed part (``a`` per model turn, the workflow's Python, the real engine's compute where it outruns
    the model) plus a part proportional to ``b``, so two probes pin both down."""
    slope = (g1 - g0) / (b1 - b0) if b1 != b0 else 0.0
    if slope <= 0:
        return b1
    return max(1e-3, b0 + (t - g0) / slope)


def balance(args: argparse.Namespace, pin: tuple[int, int] | None, seed: int, b0_ms: float = 60.0) -> dict[str, Any]:
    """``b`` such that a synchronous step of seed ``seed`` waits for generation as long as it updates (per seed:
    the update's cost follows the lengths of that seed's episodes, 0.6-0.8 s/step here).

    A probe run at ``b0`` measures the wait for rollouts G0 and the update T per step; a first guess
    scales the part of G0 above ``a`` (``a`` per model turn, the turns run in sequence) to T. A second
    probe at that guess measures G1, and :func:`solve_b` puts ``b`` where the line through both probes
    meets T. (One probe alone left generation 9-16% longer than the update: part of the wait does not
    scale with ``b``, so the runs were generation-bound rather than balanced.)
    """
    b0 = b0_ms / 1000
    g0, t0 = _probe(args, pin, seed, b0)
    g_a = args.a_s * 5.0  # the demo's episodes make ~5 model turns in sequence
    b1 = max(1e-3, b0 * max(t0 - g_a, 1e-3) / max(g0 - g_a, 1e-3))
    g1, t1 = _probe(args, pin, seed, b1)
    t = (t0 + t1) / 2
    b = solve_b(b0, g0, b1, g1, t)
    print(f"balance probes (seed {seed}, sync): b={1000 * b0:.1f} ms -> wait for rollouts {g0:.2f} s/step, update "
          f"{t0:.2f}; b={1000 * b1:.1f} ms -> {g1:.2f}, update {t1:.2f} -> b = {1000 * b:.1f} ms per token",
          file=sys.stderr, flush=True)
    return {"a_s": args.a_s, "b_s_per_token": b, "model": f"balanced on this machine (update {t:.2f} s/step)",
            "concurrency": "-", "threads": "-"}


def _tail(rewards: list[float]) -> float:
    return statistics.fmean(rewards[-max(1, len(rewards) // 3):])


def _ratios(results: list[dict[str, Any]], key: str = "tok_s") -> dict[int, dict[int, float]]:
    """η -> seed -> async/sync trained tokens/s (against the same seed's synchronous run). ``key``: ``tok_s`` over
    the whole run (wall clock of ``trainer.run``), or ``steady_tok_s`` over steps 2..N (``time/step``): the rate
    a long run settles at, without the first step (nothing to overlap it with) and the run's setup."""
    base = {r["spec"]["seed"]: r[key] for r in results if r["spec"]["eta"] is None and key in r}
    out: dict[int, dict[int, float]] = {}
    for r in results:
        seed, eta = r["spec"]["seed"], r["spec"]["eta"]
        if eta is not None and seed in base and key in r:
            out.setdefault(eta, {})[seed] = r[key] / base[seed]
    return out


def print_runs(results: list[dict[str, Any]], fit: dict[str, Any]) -> None:
    """One row per run: throughput, its ratio to the same seed's sync run, the time split, staleness."""
    where = {f"{r['engine']}{' pinned' if r['pinned'] else ''}" for r in results}
    print(f"\nmodelled engine: L(n) = {fit['a_s']:.3f} s + {1000 * fit['b_s_per_token']:.1f} ms x n per request "
          f"({fit['model']}); real engine: {', '.join(sorted(where))}\n")
    print("| seed | run | wall s | trained tok/s | vs sync | steady vs sync | waiting for rollouts s | update s | "
          "weight sync s | staleness 0/1/2 | producer idle | reward, last third |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratios, steady = _ratios(results), _ratios(results, "steady_tok_s")
    for r in results:
        stale = "/".join(f"{r['stale'].get(k, 0):.0f}" for k in ("0", "1", "2")) if r["stale"] else "-"
        idle = f"{100 * r['idle']:.0f}%" if r["idle"] is not None else "-"
        eta, seed = r["spec"]["eta"], r["spec"]["seed"]
        ratio = 1.0 if eta is None else ratios.get(eta, {}).get(seed, float("nan"))
        ss = 1.0 if eta is None else steady.get(eta, {}).get(seed, float("nan"))
        print(f"| {seed} | {r['label']} | {r['wall_s']:.1f} | {r['tok_s']:.1f} | {ratio:.2f}x | {ss:.2f}x | "
              f"{r['rollout_s']:.1f} | {r['update_s']:.1f} | {r['sync_s']:.1f} | {stale} | {idle} | "
              f"{_tail(r['rewards']):.3f} |")


def print_summary(results: list[dict[str, Any]]) -> None:
    """Per η: async/sync over seeds (min, median), the time split per step, and the learning curves against the
    synchronous runs' seed-to-seed spread."""
    ratios, steady = _ratios(results), _ratios(results, "steady_tok_s")
    by_eta: dict[int | None, list[dict[str, Any]]] = {}
    for r in results:
        by_eta.setdefault(r["spec"]["eta"], []).append(r)
    print("\n| run | seeds | async/sync min | median | steady state (steps 2..N) min | median | per step: waiting s "
          "| update s | weight sync s | reward, last third (mean ± sd over seeds) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for eta, rs in sorted(by_eta.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        steps = sum(len(r["rewards"]) for r in rs) or 1
        tails = [_tail(r["rewards"]) for r in rs]
        sd = statistics.stdev(tails) if len(tails) > 1 else 0.0
        vals = sorted(ratios.get(eta, {}).values()) if eta is not None else [1.0]
        svals = sorted(steady.get(eta, {}).values()) if eta is not None else [1.0]
        svals = svals or [float("nan")]
        print(f"| {rs[0]['label']} | {','.join(str(r['spec']['seed']) for r in rs)} | {min(vals):.2f}x | "
              f"{statistics.median(vals):.2f}x | {min(svals):.2f}x | {statistics.median(svals):.2f}x | "
              f"{sum(r['rollout_s'] for r in rs) / steps:.2f} | "
              f"{sum(r['update_s'] for r in rs) / steps:.2f} | {sum(r['sync_s'] for r in rs) / steps:.2f} | "
              f"{statistics.fmean(tails):.3f} ± {sd:.3f} |")
    sync = by_eta.get(None, [])
    print("\nreward of the trained episodes per step (mean over seeds; sync's min-max over seeds in brackets):")
    if sync:
        n = min(len(r["rewards"]) for r in sync)
        lo = [min(r["rewards"][i] for r in sync) for i in range(n)]
        hi = [max(r["rewards"][i] for r in sync) for i in range(n)]
        print("  sync band: " + " ".join(f"[{a:.2f}-{b:.2f}]" for a, b in zip(lo, hi)))
    for eta, rs in sorted(by_eta.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        n = min(len(r["rewards"]) for r in rs)
        mean = [statistics.fmean(r["rewards"][i] for r in rs) for i in range(n)]
        inside = "" if eta is None or not sync else (
            f"  ({sum(lo[i] <= m <= hi[i] for i, m in enumerate(mean[:len(lo)]))}/{min(n, len(lo))} steps inside "
            "the sync band)")
        print(f"  {rs[0]['label']:>22}: " + " ".join(f"{x:.2f}" for x in mean) + inside)
    print("\nper seed:")
    for r in results:
        print(f"  s{r['spec']['seed']} {r['label']:>22}: " + " ".join(f"{x:.2f}" for x in r["rewards"]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["calibrate", "run", "summary"], help="summary: print the tables of --results")
    p.add_argument("--work", type=Path, default=Path("runs/bench_async"))
    p.add_argument("--calib-model", default=str(Path.home() / ".cache/memrl/smollm2-135m-instruct"))
    p.add_argument("--concurrency", type=int, default=64, help="requests at once (the demo's engine.concurrency)")
    p.add_argument("--prompt-tokens", type=int, default=96, help="the demo's memory-turn prompt is ~90 tokens")
    p.add_argument("--new-tokens", type=int, nargs="+", default=[2, 4, 8, 16])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the calibration (one core)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--staleness", type=int, nargs="+", default=[1, 2])
    p.add_argument("--off-policy", default="decoupled", choices=["none", "decoupled", "tis"])
    p.add_argument("--engine", default="process", choices=["process", "replica", "thread"], help="where the real "
                   "engine runs: process (default): a child process of its own reached over a pipe (disaggregated "
                   "hardware); replica: a memrl Ray rollout replica (the same, with Ray's per-request overhead); "
                   "thread: in the trainer's process, sharing its interpreter lock")
    p.add_argument("--chunk", type=int, default=32, help="trainer.async.partial_chunk_tokens (interrupt): a weight "
                   "push cuts the pieces in flight short at the tokens their modelled decode has reached (the "
                   "engine's interrupt, as AReaL aborts requests for an update); a continuation piece pays no "
                   "prefill (--a-s) under the same weights")
    p.add_argument("--a-s", type=float, default=0.05, help="modelled seconds per request (queue + prefill)")
    p.add_argument("--b-ms", default="balance", help="modelled ms per generated token (a decode step), or "
                   "'balance' (default): chosen by a short synchronous probe so that the modelled generation of a "
                   "step takes as long as this machine's update of it (the regime a disaggregated setup is sized "
                   "for), whatever the machine's speed")
    p.add_argument("--probe-steps", type=int, default=None, help="steps of the balance probe (default --steps: the "
                   "update gets faster over the first steps, so a shorter probe overestimates it)")
    p.add_argument("--no-pin", action="store_true", help="let generation and the update share every core (by "
                   "default the engine runs on one core and the trainer on another, one torch thread each)")
    p.add_argument("--inflight", type=int, default=None, help="episodes in flight (engine.concurrency; the demo's "
                   "64 is one step's worth)")
    p.add_argument("--fit", type=Path, default=None, help="use a calibrated latency.json instead")
    p.add_argument("--results", type=Path, default=None, help="JSON lines, appended (default WORK/modelled.jsonl)")
    args = p.parse_args()
    if args.what == "calibrate":
        calibrate(args)
        return
    out = args.results or args.work / "modelled.jsonl"
    if args.what == "summary":
        results = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
        b = sorted({round(1000 * r["b_s"], 1) for r in results})
        print_runs(results, {"a_s": results[0]["a_s"], "b_s_per_token": results[0]["b_s"],
                             "model": f"b per run: {', '.join(map(str, b))} ms"})
        print_summary(results)
        return
    pin = None if args.no_pin else pin_cores()  # once: a pinned run narrows this process's own core set
    if args.fit is not None:
        fit = json.loads(args.fit.read_text())
    elif args.b_ms != "balance":
        fit = {"a_s": args.a_s, "b_s_per_token": float(args.b_ms) / 1000, "model": "fixed (--a-s, --b-ms)"}
    out.parent.mkdir(parents=True, exist_ok=True)
    results, bs = [], []
    for seed in args.seeds:
        if args.fit is None and args.b_ms == "balance":
            fit = balance(args, pin, seed)
            bs.append(f"{1000 * fit['b_s_per_token']:.1f}")
        for eta in [None, *args.staleness]:
            spec = Spec(seed, args.lr, eta, args.off_policy if eta is not None else "none", "interrupt", args.chunk,
                        steps=args.steps)
            res = run_one(spec, args.work, fit["a_s"], fit["b_s_per_token"], args.engine, pin, args.inflight)
            results.append(res)
            with out.open("a") as fh:
                fh.write(json.dumps(res) + "\n")
            print(f"{spec.name}: {res['wall_s']:.0f}s {res['tok_s']:.1f} tok/s", file=sys.stderr, flush=True)
    if bs:
        fit = {**fit, "model": f"balanced per seed on this machine: b = {', '.join(bs)} ms for seeds "
               f"{', '.join(map(str, args.seeds))}"}
    print_runs(results, fit)
    print_summary(results)


if __name__ == "__main__":
    main()
