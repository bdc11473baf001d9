"""Step-1 `logprob_mismatch` per engine at two temperatures: 2 MemAgent GRPO steps, tiny float32 model.

    python bench/logprob_mismatch.py --engines hf vllm --temperatures 1.0 0.6

Prints one row per (engine, temperature): the engine's sampling log-probs against the trainer's
recomputation. The physical floor is float32 rounding (~1e-7); vLLM's raw log-probs at T=0.6 were 0.17.
The vllm rows need vLLM (`make test-vllm` builds `.venv-vllm`; run this script with its python).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from memrl.config import load_config
from memrl.data import LongContextSample, write_samples
from memrl.train.trainer import Trainer

WORDS = ["red", "blue", "green", "key", "door", "the", "is", "of", "secret", "code"]


def _data(path: Path) -> Path:
    rng = random.Random(0)
    samples = [LongContextSample(index=i, question=f"What is the code {i}?", answers=[rng.choice(WORDS[:5])],
                                 context=" ".join(rng.choice(WORDS) for _ in range(60)), num_docs=3)
               for i in range(8)]
    write_samples(samples, path, fmt="jsonl")
    return path


def run(engine: str, temperature: float, root: Path) -> list[float]:
    out = root / f"{engine}-{temperature}"
    over = ["model.path=tiny32", "model.dtype=float32", f"engine.kind={engine}", "engine.device=cpu",
            f"data.train_file={_data(root / 'train.jsonl')}", "workflow.options.chunk_tokens=48",
            "workflow.options.memory_tokens=8", "workflow.options.final_tokens=8", "workflow.options.reward=f1",
            "algorithm.n=4", "trainer.total_steps=2", "trainer.prompts_per_step=2", f"trainer.output_dir={out}",
            f"sampling.temperature={temperature}", "trainer.lr=1e-3"]
    if engine == "vllm":
        over += ["engine.vllm.max_model_len=4096", "engine.vllm.kv_cache_memory=0.25"]
    Trainer(load_config(None, over)).run()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [m["logprob_mismatch"] for m in lines]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", nargs="+", default=["hf"])
    ap.add_argument("--temperatures", nargs="+", type=float, default=[1.0, 0.6])
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines:
            for t in args.temperatures:
                rows.append((engine, t, run(engine, t, Path(tmp))))
    print("| engine | temperature | logprob_mismatch step 1 | step 2 |")
    print("|---|---|---|---|")
    for engine, t, m in rows:
        print(f"| {engine} | {t:g} | {m[0]:.2e} | {m[1]:.2e} |")


if __name__ == "__main__":
    main()
