"""Multi-turn agents on the HF engine with and without continuous batching (engine.continuous_batching).

Usage:
    python bench/continuous_batching.py                     # tiny model, CPU
    python bench/continuous_batching.py --model ~/.cache/memrl/smollm2-135m-instruct   # after `make smol`

Each of ``--episodes`` episodes makes ``--turns`` calls one after another (an agent's next call waits
for its previous answer), each call with its own answer length drawn from ``--min-new``..``--max-new``
(as answers end at a stop token at different points). Without continuous batching a call arriving
while a batch decodes waits for that batch's longest answer; with it the call joins at the next step.
Both runs use the same seeded calls: the script checks that every call generated the same tokens, and
prints wall time, generated tokens per second and the speed-up (the peer is the same engine without
joining, measured in the same run, alternating, ``--repeats`` times each; min and median).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

import torch

from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine
from memrl.models.resolve import load_model


def workload(episodes: int, turns: int, lo: int, hi: int, vocab: int, seed: int, long_share: float = 0.0,
             long_new: int = 0) -> list[list[tuple[list[int], int]]]:
    """Per episode, its calls: (prompt ids, new tokens); a ``long_share`` of calls asks for ``long_new`` tokens
    (an agent's long answer beside its short tool calls)."""
    rng = random.Random(seed)

    def new_tokens() -> int:
        return long_new if rng.random() < long_share else rng.randint(lo, hi)

    return [[([rng.randrange(10, vocab - 10) for _ in range(rng.randint(16, 96))], new_tokens())
             for _ in range(turns)] for _ in range(episodes)]


async def run(engine: HFEngine, calls: list[list[tuple[list[int], int]]]) -> tuple[float, list[list[int]]]:
    async def episode(e: int) -> list[list[int]]:
        out = []
        for t, (prompt, new) in enumerate(calls[e]):
            params = SamplingParams(max_new_tokens=new, temperature=1.0, seed=1000 * e + t)
            out.append((await engine.generate(prompt, params)).token_ids)
        return out

    t0 = time.perf_counter()
    tokens = await asyncio.gather(*(episode(e) for e in range(len(calls))))
    wall = time.perf_counter() - t0
    await engine.close()
    return wall, [ids for ep in tokens for ids in ep]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--min-new", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--long-share", type=float, default=0.05, help="share of calls that ask for --long-new tokens")
    ap.add_argument("--long-new", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = load_model(args.model, device="cpu")
    calls = workload(args.episodes, args.turns, args.min_new, args.max_new, model.config.vocab_size, args.seed,
                     args.long_share, args.long_new)
    generated = sum(new for ep in calls for _, new in ep)
    walls: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, list[list[int]]] = {}
    for _ in range(args.repeats):
        for joining in (False, True):
            engine = HFEngine(model, continuous_batching=joining, max_batch_size=args.episodes)
            wall, outputs[joining] = asyncio.run(run(engine, calls))
            walls[joining].append(wall)
    same = sum(a == b for a, b in zip(outputs[False], outputs[True]))
    print(f"model {args.model}: {args.episodes} episodes x {args.turns} calls, {args.min_new}-{args.max_new} new "
          f"tokens each, {args.long_share:.0%} of calls {args.long_new} ({generated} in all), {args.repeats} runs each")
    for joining in (False, True):
        w = walls[joining]
        print(f"  continuous_batching={str(joining).lower():5}  wall min {min(w):.2f} s  "
              f"median {statistics.median(w):.2f} s  {generated / min(w):,.0f} tok/s (best)")
    print(f"  speed-up (median wall): {statistics.median(walls[False]) / statistics.median(walls[True]):.2f}x; "
          f"calls with equal tokens: {same}/{len(outputs[True])}")


if __name__ == "__main__":
    main()
