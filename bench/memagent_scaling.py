"""Time and peak memory of one MemAgent episode as the context grows 16x.

Usage: python bench/memagent_scaling.py [--chunk 1024] [--lengths 4096,16384,32768,65536]
Each length runs in a fresh subprocess so its peak RSS is its own. MemAgent's
claim: time grows linearly with context length while memory stays flat
(every conversation has a bounded size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRSS:
    """Samples resident memory every few ms while the episode runs."""

    def __enter__(self) -> "PeakRSS":
        self.peak = rss_mib()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_mib())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def one(length: int, chunk: int, memory: int) -> dict[str, float]:
    import torch

    from memrl.config import WorkflowConfig
    from memrl.data import LongContextSample
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.workflows.memagent import memagent

    torch.manual_seed(0)
    tok = load_tokenizer("tiny")
    engine = HFEngine(load_model("tiny", device="cpu"))
    unit = tok.encode(" ".join(f"w{i}" for i in range(200)), add_special_tokens=False)
    ids = (unit * (length // len(unit) + 1))[:length]
    sample = LongContextSample(index=0, question="What is the value?", answers=["x"], context=tok.decode(ids),
                               num_docs=1)
    del ids, unit
    cfg = WorkflowConfig(chunk_tokens=chunk, memory_tokens=memory, final_tokens=16)
    asyncio.run(memagent(LongContextSample(0, "q", ["x"], sample.context[:2000], 1), engine, tok, cfg))  # warm-up
    before = rss_mib()
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        traj = asyncio.run(memagent(sample, engine, tok, cfg))
        dt = time.perf_counter() - t0
    return {"tokens": traj.metrics["context_tokens"], "conversations": traj.num_conversations, "seconds": dt,
            "peak_rss_mib": mem.peak, "rss_before_mib": before}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--memory", type=int, default=64)
    ap.add_argument("--lengths", default="4096,16384,32768,65536")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.chunk, args.memory)))
        return
    lengths = [int(x) for x in args.lengths.split(",")]
    print(f"tiny model, chunk {args.chunk} tokens, memory budget {args.memory} tokens (forced: random model)")
    print(f"{'context tokens':>14} {'convs':>6} {'seconds':>8} {'s/1K tok':>9} {'RSS before':>11} "
          f"{'peak during':>12}  (MiB)")
    for n in lengths:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--chunk", str(args.chunk),
                              "--memory", str(args.memory)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['tokens']:>14.0f} {r['conversations']:>6} {r['seconds']:>8.2f} "
              f"{1000 * r['seconds'] / r['tokens']:>9.3f} {r['rss_before_mib']:>11.0f} {r['peak_rss_mib']:>12.0f}")


if __name__ == "__main__":
    main()
