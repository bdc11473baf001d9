"""Small data and configs shared by the vLLM tests."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from memrl.config import load_config
from memrl.data import LongContextSample, write_samples
from tests.vllm.conftest import VLLM_OVERRIDES

WORDS = ["red", "blue", "green", "key", "door", "the", "is", "of", "secret", "code"]
MEMAGENT = ["workflow.chunk_tokens=48", "workflow.memory_tokens=8", "workflow.final_tokens=8"]


def qa_file(path: Path, count: int, words: int = 60) -> Path:
    rng = random.Random(count)
    samples = [LongContextSample(index=i, question=f"What is the code {i}?", answers=[rng.choice(WORDS[:5])],
                                 context=" ".join(rng.choice(WORDS) for _ in range(words)), num_docs=3)
               for i in range(count)]
    write_samples(samples, path, fmt="jsonl")
    return path


def train_config(tmp_path: Path, steps: int, **extra: object) -> dict:
    raw = load_config(None, [*VLLM_OVERRIDES, *MEMAGENT]).model_dump(mode="json")
    raw["data"]["train_file"] = str(qa_file(tmp_path / "train.jsonl", 8))
    raw["workflow"]["reward"] = "f1"
    raw["algorithm"].update(n=4, entropy_coef=0.01)  # the entropy bonus moves the weights whatever the rewards
    raw["trainer"].update(lr=1e-3, total_steps=steps, prompts_per_step=2, save_every=1, keep_checkpoints=steps,
                          output_dir=str(tmp_path / "run"), seed=5)
    for dotted, value in extra.items():
        sec, key = dotted.split("__")
        raw[sec][key] = value
    return raw


def memrl(*args: object, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memrl.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
