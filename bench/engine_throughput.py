"""HF-engine generation throughput at 1, 8 and 32 concurrent requests.

Usage: python bench/engine_throughput.py [--model tiny] [--prompt-tokens 128] [--new-tokens 64]
"Concurrency 1" sends requests one after another (no batching possible); at
8 and 32 the engine gathers the concurrent requests into batches. Prints
generated tokens per second and the speed-up over one-at-a-time.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import torch

from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine
from memrl.models.resolve import load_model
from memrl.models.tiny import build_tiny_model


async def run(engine: HFEngine, concurrency: int, requests: int, prompt_tokens: int, new_tokens: int) -> float:
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    prompts = [[(7 * i + j) % 200 + 10 for j in range(prompt_tokens)] for i in range(requests)]
    sem = asyncio.Semaphore(concurrency)

    async def one(p: list[int]) -> int:
        async with sem:
            return len((await engine.generate(p, params)).token_ids)

    t0 = time.perf_counter()
    total = sum(await asyncio.gather(*(one(p) for p in prompts)))
    return total / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=None, help="model spec; default: a freshly built tiny model (see --hidden)")
    ap.add_argument("--hidden", type=int, default=256, help="hidden size of the built tiny model")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.model is None:
        tmp = tempfile.mkdtemp()
        build_tiny_model(tmp, hidden_size=args.hidden, num_layers=args.layers, intermediate_size=4 * args.hidden,
                         num_heads=max(args.hidden // 64, 1), num_kv_heads=max(args.hidden // 128, 1))
        spec = tmp
    else:
        spec = args.model
    model = load_model(spec, device=args.device)
    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"model {args.model or 'tiny'} ({params_m:.2f}M params) on {next(model.parameters()).device}, "
          f"{torch.get_num_threads()} threads; prompt {args.prompt_tokens}, new {args.new_tokens} tokens, "
          f"{args.requests} requests")
    engine = HFEngine(model, max_batch_size=32)
    asyncio.run(run(engine, 4, 8, args.prompt_tokens, 8))  # warm-up
    base = None
    print(f"{'concurrency':>11} {'tokens/s':>10} {'speed-up':>9}")
    for c in (1, 8, 32):
        n = args.requests if c > 1 else max(8, args.requests // 4)
        tps = asyncio.run(run(engine, c, n, args.prompt_tokens, args.new_tokens))
        base = base or tps
        print(f"{c:>11} {tps:>10.1f} {tps / base:>8.1f}x")


if __name__ == "__main__":
    main()
