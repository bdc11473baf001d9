"""Time and peak memory of long-context synthesis as the document count grows.

Usage: python bench/synth_scaling.py [--data ../shared/data] [--samples 8]
Prints one line per N; time should grow linearly with output bytes, and the
peak traced Python memory during writing should stay flat.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

from memrl.data import plan_synthesis


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--docs", default="400,800,1600,3200")
    args = ap.parse_args()
    docs = [int(x) for x in args.docs.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_synthesis(args.data / "hotpotqa_dev_head53.json", tmp, docs,
                              pool_files=[args.data / "wiki_paragraphs.jsonl"], max_samples=args.samples)
        print(f"{'docs':>6} {'MB out':>8} {'seconds':>8} {'MB/s':>7} {'peak MiB':>9}")
        for n in docs:
            path = Path(tmp) / f"eval_{n}.json"
            tracemalloc.start()
            t0 = time.perf_counter()
            plan.synth.write_eval_file(n, path)
            dt = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            mb = path.stat().st_size / 1e6
            print(f"{n:>6} {mb:>8.1f} {dt:>8.3f} {mb / dt:>7.1f} {peak:>9.2f}")


if __name__ == "__main__":
    main()
