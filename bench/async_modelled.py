"""The overlap gain of asynchronous training where the hardware cannot hide it: a modelled decode time.

On a 2-core CPU the engine and the update compete for the same cores, so async cannot overlap
them (``bench/async_vs_sync.py``: 0.75-1.0x). On real hardware the engine runs on devices of
its own. This bench models that:

1. ``calibrate``: time a real engine (the in-process HF engine serving ``--calib-model``,
   SmolLM2-135M by default) on the demo's request shape: ``--concurrency`` requests at once
   of a ~``--prompt-tokens`` prompt, for several new-token counts n, and fit the per-request
   latency ``L(n) = a + b * n`` by least squares (``a``: queueing + prefill, ``b``: one batched
   decode step). The fit is written to ``WORK/latency.json``.
2. ``run``: train the demo task synchronously and asynchronously (η = ``--staleness``) with a
   :class:`ModelledLatencyEngine`: the real tiny policy generates every token (so the learning
   is real), and each request then *sleeps* until ``L(n)`` has passed since it started. The
   sleeping costs no core; only the tiny model's own compute competes with the update.

The latency model used by ``run`` is ``--a-s`` + ``--b-ms`` per token. By default ``b`` is
*balanced*: a short synchronous probe measures this machine's update time per step, and ``b`` is
set so that the modelled generation of a step (~4 sequential model calls of 4-8 tokens) takes as
long: the regime a disaggregated setup is sized for, on a fast or a loaded machine alike (a fixed
``b`` gives a different regime on each). ``--b-ms 60`` fixes it; ``--fit WORK/latency.json`` uses the
calibrated line. The
speed-up of perfect overlap is (G + T) / max(G, T) for generation G and update T per step: the
time split it prints says which regime a run was in.

It prints trained tokens/s of each mode, the async/sync ratio, the time split (trainer waiting
for rollouts, update, weight sync) and the learning curves (reward of the trained episodes).

    python bench/async_modelled.py calibrate                                   # SmolLM2-135M, one core
    python bench/async_modelled.py calibrate --calib-model runs/bench_async/seed0/sft_model
    python bench/async_modelled.py run --seeds 0 1 2 --staleness 1 2 --steps 12
"""

from __future__ import annotations

import argparse
import os
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


class ModelledLatencyEngine:
    """An engine whose requests take ``a + b * new_tokens`` seconds: the tokens come from ``inner``, the time
    from the latency model (the inner engine's own compute counts toward it)."""

    def __init__(self, inner: Any, a: float, b: float) -> None:
        self.inner = inner
        self.a = a
        self.b = b
        self.busy_s = 0.0  # modelled seconds of requests (summed over requests)

    def __getattr__(self, name: str) -> Any:  # weight updates, close, ...
        return getattr(self.inner, name)

    async def generate(self, prompt_ids: Any, params: Any) -> Any:
        t0 = time.perf_counter()
        res = await self.inner.generate(prompt_ids, params)
        target = self.a + self.b * len(res.token_ids)
        self.busy_s += target
        left = target - (time.perf_counter() - t0)
        if left > 0:
            await asyncio.sleep(left)
        return res


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


def pin_cores() -> tuple[int, int] | None:
    """(engine core, trainer core): two cores of this process's set, or None when it has fewer (or no affinity)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None
    return (cores[0], cores[1]) if len(cores) >= 2 else None


def _pinned(fn: Any, core: int) -> Any:
    """``fn`` run on ``core`` (the decode thread pins itself on entry: the engine's own core)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        os.sched_setaffinity(0, {core})
        return fn(*args, **kwargs)
    return run


def run_one(spec: Spec, work: Path, a: float, b: float, pin: tuple[int, int] | None = None) -> dict[str, Any]:
    """One training run on the demo task with the modelled engine; its summary and the engine's busy share.

    ``pin``: the engine decodes on one core and the trainer updates on the other, one thread each (the
    hardware split of a disaggregated setup, where generation cannot take the trainer's cores); both modes
    run under the same split."""
    import shutil

    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model
    from memrl.train.trainer import Trainer
    from memrl_demo.run import DEMO_THREADS, deterministic

    with deterministic(spec.seed, threads=1 if pin else DEMO_THREADS):
        if pin:
            os.sched_setaffinity(0, {pin[1]})  # this thread updates; threads it starts inherit the core
        cfg = build_config(spec, work)
        shutil.rmtree(cfg.trainer.output_dir, ignore_errors=True)
        model = load_model(cfg.model.path, device="cpu")
        model.eval()
        inner = HFEngine(model, pad_token_id=0, max_batch_size=cfg.engine.max_batch_size, seed=cfg.trainer.seed)
        if pin:
            inner._generate_batch = _pinned(inner._generate_batch, pin[0])  # type: ignore[method-assign]
        engine = ModelledLatencyEngine(inner, a, b)
        trainer = Trainer(cfg, engine=engine, tracker_console=Console(stderr=True, quiet=True))
        t0 = time.perf_counter()
        trainer.run()
        wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (Path(cfg.trainer.output_dir) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "train_tokens" in r]
    return {"spec": spec.__dict__, "label": spec.label, "modelled_engine_s": engine.busy_s, **summarise(rows, wall)}


def balance(args: argparse.Namespace, b0_ms: float = 60.0) -> dict[str, Any]:
    """``b`` such that a synchronous step waits for generation as long as it updates.

    A probe run at ``b0`` measures the wait for rollouts G0 and the update T per step. The
    wait is the per-request part ``a`` (fixed) plus ``b`` times the tokens of the step's chain
    of model calls, so it scales with ``b`` minus the fixed part: ``b = b0 (T - G_a) / (G0 - G_a)``,
    with ``G_a`` the share of ``a`` (``a`` per model turn of an episode, the turns run in sequence).
    """
    spec = Spec(args.seeds[0], args.lr, None, "none", "interrupt", 32, steps=args.probe_steps)
    probe = run_one(spec, args.work, args.a_s, b0_ms / 1000, None if args.no_pin else pin_cores())
    steps = max(1, len(probe["rewards"]))
    g0, t = probe["rollout_s"] / steps, probe["update_s"] / steps
    g_a = args.a_s * probe.get("turns", 5.0)
    b = max(1e-3, b0_ms / 1000 * max(t - g_a, 1e-3) / max(g0 - g_a, 1e-3))
    print(f"balance probe ({steps} sync steps at b={b0_ms:.0f} ms): wait for rollouts {g0:.2f} s/step, update "
          f"{t:.2f} s/step -> b = {1000 * b:.1f} ms per token", file=sys.stderr, flush=True)
    return {"a_s": args.a_s, "b_s_per_token": b, "model": f"balanced on this machine (update {t:.2f} s/step)",
            "concurrency": "-", "threads": "-"}


def print_table(results: list[dict[str, Any]], fit: dict[str, Any]) -> None:
    print(f"\nmodelled engine: L(n) = {fit['a_s']:.3f} s + {1000 * fit['b_s_per_token']:.1f} ms x n per request "
          f"({fit['model']}; {fit['concurrency']} requests at once, {fit['threads']} threads)\n")
    print("| seed | run | wall s | trained tok/s | vs sync | waiting for rollouts s | update s | sync s | "
          "staleness 0/1/2 | producer idle | reward, last third |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    base = {r["spec"]["seed"]: r["tok_s"] for r in results if r["spec"]["eta"] is None}
    for r in results:
        stale = "/".join(f"{r['stale'].get(k, 0):.0f}" for k in ("0", "1", "2")) if r["stale"] else "-"
        idle = f"{100 * r['idle']:.0f}%" if r["idle"] is not None else "-"
        tail = statistics.fmean(r["rewards"][-max(1, len(r["rewards"]) // 3):])
        ratio = r["tok_s"] / base[r["spec"]["seed"]] if r["spec"]["seed"] in base else float("nan")
        print(f"| {r['spec']['seed']} | {r['label']} | {r['wall_s']:.1f} | {r['tok_s']:.1f} | {ratio:.2f}x | "
              f"{r['rollout_s']:.1f} | {r['update_s']:.1f} | {r['sync_s']:.1f} | {stale} | {idle} | {tail:.3f} |")
    print("\nreward of the trained episodes per step:")
    for r in results:
        print(f"  s{r['spec']['seed']} {r['label']:>24}: " + " ".join(f"{x:.2f}" for x in r["rewards"]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["calibrate", "run"])
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
    p.add_argument("--a-s", type=float, default=0.05, help="modelled seconds per request (queue + prefill)")
    p.add_argument("--b-ms", default="balance", help="modelled ms per generated token (a decode step), or "
                   "'balance' (default): chosen by a short synchronous probe so that the modelled generation of a "
                   "step takes as long as this machine's update of it (the regime a disaggregated setup is sized "
                   "for), whatever the machine's speed")
    p.add_argument("--probe-steps", type=int, default=4, help="steps of the balance probe")
    p.add_argument("--no-pin", action="store_true", help="let generation and the update share every core (by "
                   "default the engine decodes on one core and the trainer on another, one thread each)")
    p.add_argument("--fit", type=Path, default=None, help="use a calibrated latency.json instead")
    p.add_argument("--results", type=Path, default=None, help="JSON lines (default WORK/modelled.jsonl)")
    args = p.parse_args()
    if args.what == "calibrate":
        calibrate(args)
        return
    if args.fit is not None:
        fit = json.loads(args.fit.read_text())
    elif args.b_ms == "balance":
        fit = balance(args)
    else:
        fit = {"a_s": args.a_s, "b_s_per_token": float(args.b_ms) / 1000, "model": "fixed (--a-s, --b-ms)",
               "concurrency": "-", "threads": "-"}
    out = args.results or args.work / "modelled.jsonl"
    results = []
    for seed in args.seeds:
        for eta in [None, *args.staleness]:
            spec = Spec(seed, args.lr, eta, args.off_policy if eta is not None else "none", "interrupt", 32,
                        steps=args.steps)
            res = run_one(spec, args.work, fit["a_s"], fit["b_s_per_token"], None if args.no_pin else pin_cores())
            results.append(res)
            with out.open("a") as fh:
                fh.write(json.dumps(res) + "\n")
            print(f"{spec.name}: {res['wall_s']:.0f}s {res['tok_s']:.1f} tok/s", file=sys.stderr, flush=True)
    print_table(results, fit)


if __name__ == "__main__":
    main()
