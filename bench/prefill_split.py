"""Prefill by length against one padded prefill, on a CPU: the HF engine's batch of prompts of different lengths.

Where a padding mask materializes attention scores (a CPU), ``memrl.engines.hf_batch.prefill`` prefills prompts
of each length apart, without a mask, once the longest reaches ``SPLIT_PREFILL_TOKENS``, and joins their caches.
Printed per setting: the padded prefill (the engine before, measured here in the same process), the split one,
the speed-up, and the largest log-prob difference of the first generated token (float rounding only).
Each time is the best of ``--repeats`` runs of a whole batch (all requests in flight, 1 new token each).

    python bench/prefill_split.py --model tiny
    python bench/prefill_split.py --model smollm2-135m-instruct --settings 4x3000-6000 8x500-2000
"""

from __future__ import annotations

import argparse
import asyncio
import time

import torch


def batch(model, prompts, split: bool, repeats: int) -> tuple[float, list[float]]:
    from memrl.engines.base import SamplingParams
    from memrl.engines.hf import HFEngine

    best, logprobs = float("inf"), []
    for _ in range(repeats):
        eng = HFEngine(model)
        eng._split_prefill = split

        async def go():
            return await asyncio.gather(*(eng.generate(p, SamplingParams(max_new_tokens=1, greedy=True))
                                          for p in prompts))

        start = time.perf_counter()
        out = asyncio.run(go())
        best = min(best, time.perf_counter() - start)
        logprobs = [r.logprobs[0] for r in out]
    return best, logprobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--settings", nargs="+", default=["4x3000-6000", "8x500-2000", "16x200-900", "32x100-300"],
                    help="ROWSxMIN-MAX: that many prompts, lengths drawn uniformly in [MIN, MAX)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    from memrl.models.resolve import load_model

    model = load_model(args.model, device="cpu")
    vocab = model.get_input_embeddings().num_embeddings
    print(f"model {args.model}, {torch.get_num_threads()} threads, CPU")
    print(f"{'setting':>14} {'padded s':>9} {'split s':>8} {'speed-up':>8} {'max |dlogp|':>11}")
    gen = torch.Generator().manual_seed(0)
    for setting in args.settings:
        rows, span = setting.split("x")
        lo, hi = map(int, span.split("-"))
        lengths = torch.randint(lo, hi, (int(rows),), generator=gen).tolist()
        prompts = [torch.randint(1, vocab - 1, (n,), generator=gen).tolist() for n in lengths]
        padded, lp_padded = batch(model, prompts, False, args.repeats)
        split, lp_split = batch(model, prompts, True, args.repeats)
        diff = max(abs(a - b) for a, b in zip(lp_padded, lp_split))
        print(f"{setting:>14} {padded:9.2f} {split:8.2f} {padded / split:7.2f}x {diff:11.1e}")


if __name__ == "__main__":
    main()
