"""Why the update slows while the producer generates: the same update timed with the engine idle, generating in
the trainer's process, and generating in a process of its own.

The update is the demo's (its warm-started tiny model, AdamW, micro-batches of ``--micro`` rows of
``--tokens`` tokens, ``--rows`` rows a step), on one core with one torch thread. The generator keeps
``--concurrency`` requests of a ``--prompt``-token prompt and ``--new`` new tokens running, on the other core:

* ``idle``: no generation (what a synchronous step's update sees);
* ``thread``: an HF engine in this process, its decode thread pinned to the other core
  (``bench/async_modelled.py --engine thread``);
* ``process``: an HF engine in a child process reached over a pipe, pinned to the other core
  (``bench/async_modelled.py --engine process``, the default);
* ``replica``: a memrl rollout replica (a Ray actor) pinned to the other core (``--engine replica``).

The trainer's other threads (the generator's client loop among them) run on the engine's core, as in
``bench/async_modelled.py`` during an update.

If the in-process generator slows the update and the out-of-process ones do not, what the two shared was the process
(Python's interpreter lock), not the cores or memory bandwidth.

    python bench/update_contention.py --work runs/bench_async
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from modelled_engine import RolloutHost, pin_cores, pin_process  # noqa: E402


class Generator:
    """Keeps ``concurrency`` requests running on ``engine`` from a loop thread of this process until stopped."""

    def __init__(self, engine: Any, concurrency: int, prompt: list[int], new: int) -> None:
        self.engine, self.concurrency, self.prompt, self.new = engine, concurrency, prompt, new
        self.tokens = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _one(self, k: int) -> None:
        from memrl.engines.base import SamplingParams

        while not self.stop.is_set():
            res = await self.engine.generate(self.prompt, SamplingParams(temperature=1.0, max_new_tokens=self.new,
                                                                         seed=k))
            self.tokens += len(res.token_ids)
            k += self.concurrency

    async def _main(self) -> None:
        await asyncio.gather(*(self._one(k) for k in range(self.concurrency)))


def time_updates(model: Any, args: argparse.Namespace) -> list[float]:
    """Seconds of each of ``args.updates`` update steps (forward, backward, AdamW) on fixed random rows."""
    import torch

    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    rows = torch.randint(3, vocab, (args.rows, args.tokens), generator=gen)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()
    out = []
    for _ in range(args.updates):
        t0 = time.perf_counter()
        for i in range(0, args.rows, args.micro):
            ids = rows[i:i + args.micro]
            logits = model(input_ids=ids).logits[:, :-1]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
            loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(time.perf_counter() - t0)
    return out


def measure(mode: str, cfg: Any, args: argparse.Namespace, pin: tuple[int, int]) -> dict[str, float]:
    """Update seconds per step (median) and generated tokens/s under ``mode``."""
    import torch

    from memrl.models.resolve import load_model

    torch.set_num_threads(1)
    host = RolloutHost(cfg, mode, pin) if mode != "idle" else None
    gen = None
    try:
        if host is not None:
            prompt = [(7 * i) % 200 + 10 for i in range(args.prompt)]
            gen = Generator(host.engine, args.concurrency, prompt, args.new)
            gen.thread.start()
            time.sleep(3.0)  # the generator is running before the first timed update
        model = load_model(cfg.model.path, device="cpu")
        pin_process(os.getpid(), {pin[0]}, skip=threading.get_native_id())  # as RolloutHost.attach does
        os.sched_setaffinity(0, {pin[1]})
        t0, tok0 = time.perf_counter(), gen.tokens if gen else 0
        steps = time_updates(model, args)
        gen_s = (gen.tokens - tok0) / (time.perf_counter() - t0) if gen else 0.0
    finally:
        if gen is not None:
            gen.stop.set()
            gen.thread.join(timeout=60)
        if host is not None:
            host.close()
    return {"update_s": statistics.median(steps), "update_min_s": min(steps), "gen_tok_s": gen_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=Path("runs/bench_async"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--modes", nargs="+", default=["idle", "thread", "replica", "process"],
                   choices=["idle", "thread", "replica", "process"])
    p.add_argument("--updates", type=int, default=6)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--micro", type=int, default=16)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--prompt", type=int, default=90)
    p.add_argument("--new", type=int, default=6)
    args = p.parse_args()
    pin = pin_cores()
    if pin is None:
        sys.exit("error: this bench needs two cores (one for the engine, one for the update)")
    from async_vs_sync import Spec, build_config

    cfg = build_config(Spec(args.seed, 3e-4, None), args.work)
    print(f"update: {args.rows} rows x {args.tokens} tokens in micro-batches of {args.micro}, core {pin[1]}; "
          f"generator: {args.concurrency} requests of {args.prompt}+{args.new} tokens, core {pin[0]}\n")
    print("| generator | update s/step (median) | fastest | vs idle | generated tok/s |")
    print("|---|---|---|---|---|")
    base = None
    for mode in args.modes:
        res = measure(mode, cfg, args, pin)
        base = base or res["update_s"]
        print(f"| {mode} | {res['update_s']:.3f} | {res['update_min_s']:.3f} | {res['update_s'] / base:.2f}x | "
              f"{res['gen_tok_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
