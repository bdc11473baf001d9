"""Beyond a million tokens: time and peak RSS of synthesis and of a MemAgent eval episode at 6400-25600 documents.

Usage: python bench/million_tokens.py [--data ../shared/data] [--docs 6400,12800,25600] [--samples 2]
         [--chunk 4096] [--memory 16] [--final 8] [--eager]

For each N, every phase runs in its own subprocess so its peak resident memory is its own:

* synth: ``plan_synthesis`` of ``--samples`` questions (HotpotQA head + wiki paragraph pool, repeats allowed)
  into ``eval_N.json``, streamed to disk;
* stream: the eval file read as memrl eval reads it (lazily) and sample 0's context encoded chunk-wise
  with the tiny tokenizer, chunk by chunk, nothing else kept;
* episode: one greedy MemAgent episode over sample 0 (a scripted engine that answers every memory turn
  with ``--memory`` tokens and the final turn with ``--final``, so no model time is measured);
* eager (with ``--eager``): what reading used to cost, the file loaded whole and sample 0 encoded whole.

The episode's Trajectory keeps every memory turn's prompt ids (training needs them), so its size grows
with the context: "kept ids" says how many, "kept MiB" what they take (packed: ~5 bytes a token);
"RSS after" is the process once the episode has returned (the Trajectory still held).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRSS:
    """Samples resident memory every few ms while a phase runs."""

    def __enter__(self) -> PeakRSS:
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


class QuietEngine:
    """Replies with fixed tokens and keeps nothing, so the bench measures memrl, not a recorder."""

    def __init__(self, memory: list[int], final: list[int], final_budget: int) -> None:
        self.memory, self.final, self.final_budget, self.turns = memory, final, final_budget, 0

    async def generate(self, prompt_ids, params):  # type: ignore[no-untyped-def]
        from memrl.engines.base import GenerationResult

        self.turns += 1
        out = (self.final if params.max_new_tokens == self.final_budget else self.memory)[: params.max_new_tokens]
        return GenerationResult(list(out), [0.0] * len(out), "length")


def phase(name: str, args: argparse.Namespace, n: int, path: Path) -> dict[str, float]:
    from memrl.config import WorkflowConfig
    from memrl.models.resolve import load_tokenizer

    cfg = WorkflowConfig(chunk_tokens=args.chunk, memory_tokens=args.memory, final_tokens=args.final)
    tok = load_tokenizer("tiny") if name != "synth" else None
    import memrl.data.stream  # noqa: F401  (imports are not what is measured)
    import memrl.workflows.memagent  # noqa: F401
    out: dict[str, float] = {}
    before = rss_mib()
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        if name == "synth":
            from memrl.data import plan_synthesis

            plan = plan_synthesis(args.data / "hotpotqa_dev_head53.json", path.parent, [n],
                                  pool_files=[args.data / "wiki_paragraphs.jsonl"], allow_repeats=True,
                                  max_samples=args.samples)
            (report,) = plan.run()
            out["approx_tokens"] = report.tokens_mean
            out["mb"] = path.stat().st_size / 1e6
        elif name == "stream":
            from memrl.data.stream import read_samples_lazily
            from memrl.workflows.common import ContextChunks

            sample = next(iter(read_samples_lazily(path)))
            chunks = ContextChunks(sample, tok, cfg)
            out["chunks"] = sum(1 for _ in chunks)
            out["tokens"] = chunks.original
        elif name == "episode":
            from memrl.data.stream import read_samples_lazily
            from memrl.workflows.memagent import memagent

            sample = next(iter(read_samples_lazily(path)))
            engine = QuietEngine(tok.encode(" memo" * args.memory)[: args.memory],
                                 tok.encode("\\boxed{x}")[: args.final], args.final)
            traj = asyncio.run(memagent(sample, engine, tok, cfg))
            out["tokens"] = traj.metrics["context_tokens"]
            out["chunks"] = traj.num_conversations - 1
            out["kept_ids"] = sum(len(c.token_ids) for c in traj.conversations)
            out["kept_mib"] = sum(c.nbytes for c in traj.conversations) / 2**20
            out["rss_after"] = rss_mib()
        else:  # eager: the whole file loaded, the context encoded whole
            from memrl.data import read_samples
            from memrl.workflows.common import encode_text

            samples = list(read_samples(path))
            out["tokens"] = len(encode_text(tok, samples[0].context))
        out["seconds"] = time.perf_counter() - t0
    out["rss_before"], out["peak"] = before, mem.peak
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--docs", default="6400,12800,25600")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--memory", type=int, default=16)
    ap.add_argument("--final", type=int, default=8)
    ap.add_argument("--eager", action="store_true", help="also measure reading and encoding whole")
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--path", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args, args.n, args.path)))
        return
    phases = ["synth", "stream", "episode"] + (["eager"] if args.eager else [])
    print(f"tiny tokenizer, chunk {args.chunk}, memory {args.memory}, final {args.final}, greedy scripted engine; "
          f"{args.samples} questions per file, wiki pool with repeats; peak RSS per phase (own subprocess)")
    print(f"{'docs':>6} {'phase':>8} {'MB file':>8} {'tokens':>10} {'chunks':>7} {'seconds':>8} "
          f"{'RSS before':>11} {'peak MiB':>9} {'RSS after':>10} {'kept ids':>11} {'kept MiB':>9}")
    for n in (int(x) for x in args.docs.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"eval_{n}.json"
            mb = 0.0
            for name in phases:
                cmd = [sys.executable, __file__, "--phase", name, "--n", str(n), "--path", str(path),
                       "--data", str(args.data), "--samples", str(args.samples), "--chunk", str(args.chunk),
                       "--memory", str(args.memory), "--final", str(args.final)]
                res = subprocess.run(cmd, capture_output=True, text=True)
                if res.returncode:
                    sys.exit(f"{name} at {n} docs failed:\n{res.stderr[-3000:]}")
                r = json.loads(res.stdout.strip().splitlines()[-1])
                mb = r.get("mb", mb)
                tokens = r.get("tokens", r.get("approx_tokens", 0))
                label = f"{tokens:>10,.0f}" + ("~" if name == "synth" else "")
                print(f"{n:>6} {name:>8} {mb:>8.1f} {label:>10} {r.get('chunks', 0):>7.0f} {r['seconds']:>8.2f} "
                      f"{r['rss_before']:>11.0f} {r['peak']:>9.0f} {r.get('rss_after', 0):>10.0f} "
                      f"{r.get('kept_ids', 0):>11,.0f} {r.get('kept_mib', 0):>9.1f}", flush=True)


if __name__ == "__main__":
    main()
