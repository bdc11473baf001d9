"""Peak memory of the HF engine prefilling long prompts of different lengths on a CPU, with and without the cap.

A left-padded batch gives attention a mask, and on a CPU SDPA then materializes the scores: rows x heads x
length^2 float32. ``engine.max_attention_gb`` (default 12 on a CPU) makes the batcher prefill such prompts
fewer at a time. Each setting runs in a process of its own (peak RSS is per process); printed: the batch
sizes the engine used, wall seconds and peak RSS, beside the scores' size the uncapped batch implies.

    python bench/prefill_memory.py --model tiny --prompts 6 --length 12000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one(model_spec: str, prompts: int, length: int, cap_gb: float | None) -> dict:
    import asyncio

    from memrl.engines.base import SamplingParams
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model

    model = load_model(model_spec, device="cpu")
    eng = HFEngine(model, max_attention_bytes=None if cap_gb is None else int(cap_gb * 2**30))
    batch = [[5 + (i + j) % 200 for j in range(length - 7 * i)] for i in range(prompts)]  # all lengths differ

    async def go() -> None:
        await asyncio.gather(*[eng.generate(p, SamplingParams(max_new_tokens=2, greedy=True)) for p in batch])
        await eng.close()

    start = time.perf_counter()
    asyncio.run(go())
    return {"batch_sizes": eng.stats.batch_sizes, "seconds": round(time.perf_counter() - start, 1),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "heads": model.config.num_attention_heads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--length", type=int, default=12000)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one setting, print JSON
    args = ap.parse_args()
    if args.one is not None:
        cap = None if args.one == "default" else float(args.one)
        print(json.dumps(one(args.model, args.prompts, args.length, cap)))
        return
    for label, cap in (("default cap (12 GB on a CPU)", "default"), ("no cap", str(2**32))):
        proc = subprocess.run([sys.executable, __file__, "--model", args.model, "--prompts", str(args.prompts),
                               "--length", str(args.length), "--one", cap], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{label}: failed ({(proc.stderr.strip().splitlines() or ['?'])[-1]})")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        scores = args.prompts * r["heads"] * args.length ** 2 * 4 / 2**30
        print(f"{label:28s} batches {r['batch_sizes']}, {r['seconds']} s, peak RSS {r['peak_rss_gb']} GB "
              f"(scores of all {args.prompts} at once: {scores:.1f} GB)")


if __name__ == "__main__":
    main()
