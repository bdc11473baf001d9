"""Small training setups shared by the trainer tests."""

from __future__ import annotations

import random
from pathlib import Path

from memrl.config import MemRLConfig
from memrl.data import LongContextSample, write_samples
from memrl.engines.base import SamplingParams
from memrl.testing import ScriptedEngine


def write_task(path: Path, n: int = 12) -> Path:
    rng = random.Random(0)
    samples = [LongContextSample(index=i, question=f"Which letter {i}?", answers=["c" if i % 2 else "b"],
                                 context=" ".join(rng.choice(["x", "y", "z"]) for _ in range(40)), num_docs=1)
               for i in range(n)]
    write_samples(samples, path, fmt="jsonl")
    return path


def config(tmp: Path, **over: object) -> MemRLConfig:
    raw: dict = {
        "model": {"path": "tiny"},
        "data": {"train_file": str(write_task(tmp / "train.jsonl"))},
        "workflow": {"chunk_tokens": 32, "memory_tokens": 3, "final_tokens": 6, "reward": "em"},
        "algorithm": {"n": 4},
        "trainer": {"lr": 1e-3, "total_steps": 2, "prompts_per_step": 2, "save_every": 1,
                    "output_dir": str(tmp / "run"), "seed": 3},
        "engine": {"device": "cpu"},
    }
    for dotted, value in over.items():
        sec, key = dotted.split("__")
        raw.setdefault(sec, {})[key] = value
    return MemRLConfig.model_validate(raw)


def coin_engine(tokenizer, p_right: float = 0.5, seed: int = 0) -> ScriptedEngine:
    """Answers '\\boxed{c}' or '\\boxed{b}' at random: rewards vary inside every group.

    (Not 'a': an article normalises to an empty answer, which data files may not hold as gold.)
    """
    rng = random.Random(seed)
    enc = lambda t: tokenizer.encode(t, add_special_tokens=False)  # noqa: E731

    def reply(prompt: list[int], params: SamplingParams) -> list[int]:
        if params.max_new_tokens == 6:
            return enc("\\boxed{" + ("c" if rng.random() < p_right else "b") + "}") + [tokenizer.eos_token_id]
        return enc("ok") + [tokenizer.eos_token_id]

    return ScriptedEngine(reply)


def text_reward(text: str, **_: object) -> float:
    """0 or 1 from a hash of the response text: rewards vary inside a group even for a random model, so the
    policy-gradient term (not only the entropy bonus) drives the update (for workflow.reward=tests.train.helpers:text_reward)."""
    import zlib

    return float(zlib.crc32(text.encode()) % 2)
