"""The demo job (``memrl demo`` / ``make demo``): warm start, then MemAgent GRPO, on a 2-core CPU.

1. Build a tiny Qwen2-architecture model and a tokenizer for the needle task.
2. Warm start: SFT on trajectories of a sloppy teacher (it forgets the code
   60% of the time on chunks without the needle).
3. Held-out accuracy (greedy) on documents 2-4x longer than any training document.
4. MemAgent GRPO on the training documents; reward is exact match of the boxed code.
5. Held-out accuracy again, a reward-curve PNG, and a summary.

Every stage is skipped when its output exists, so an interrupted demo resumes.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from memrl.config import MemRLConfig
from memrl.config.schema import WorkflowConfig
from memrl.data import write_samples
from memrl.demo.needle import make_split, tokenizer_corpus
from memrl.demo.teacher import TeacherEngine
from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine
from memrl.workflows.memagent import memagent

WORKFLOW = dict(name="memagent", chunk_tokens=48, memory_tokens=4, final_tokens=8, question_tokens=32, reward="em")


def build_data(out: Path, seed: int) -> tuple[Path, Path]:
    train, held = out / "data" / "train.jsonl", out / "data" / "heldout.jsonl"
    if not held.is_file():
        write_samples(make_split(seed + 1, 256, (8, 16)), train, fmt="jsonl")  # ~1.5-3 chunks
        write_samples(make_split(seed + 2, 64, (36, 44)), held, fmt="jsonl")  # ~7-9 chunks: longer than training
    return train, held


def build_model(out: Path, seed: int) -> Path:
    from memrl.models.tiny import build_tiny_model

    path = out / "model_init"
    if not (path / "config.json").is_file():
        from memrl.data.atomic import atomic_dir

        with atomic_dir(path) as tmp:
            build_tiny_model(tmp, tokenizer_corpus(), vocab_size=600, hidden_size=128, num_layers=2, num_heads=4,
                             num_kv_heads=2, intermediate_size=384, max_position_embeddings=4096, seed=seed)
    return path


async def teacher_trajectories(samples: list[Any], tokenizer: Any, forget_p: float, seed: int) -> list[Any]:
    wf = WorkflowConfig(**WORKFLOW)
    rng = random.Random(seed)
    out = []
    for s in samples:
        eng = TeacherEngine(tokenizer, s.answers[0], wf.final_tokens, forget_p, rng)
        out.append(await memagent(s, eng, tokenizer, wf))
    return out


async def accuracy(model: Any, tokenizer: Any, samples: list[Any]) -> float:
    eng = HFEngine(model, pad_token_id=tokenizer.pad_token_id)
    wf = WorkflowConfig(**WORKFLOW)
    trajs = await asyncio.gather(*(memagent(s, eng, tokenizer, wf, sampling=SamplingParams(greedy=True))
                                   for s in samples))
    await eng.close()
    return 100.0 * statistics.fmean(t.reward for t in trajs)


def run_demo(out: Path, *, rl_steps: int = 30, seed: int = 0, console: Console | None = None) -> dict[str, float]:
    from memrl.data import read_samples
    from memrl.models.resolve import load_model, load_tokenizer
    from memrl.train.policy import export_model
    from memrl.train.sft import sft
    from memrl.train.tracking import plot_run
    from memrl.train.trainer import Trainer

    console = console or Console(stderr=True)
    t0 = time.perf_counter()
    train_file, held_file = build_data(out, seed)
    init = build_model(out, seed)
    tok = load_tokenizer(str(init))
    train, held = list(read_samples(train_file)), list(read_samples(held_file))
    console.print(f"[bold]memrl demo[/bold]: needle task, {len(train)} training docs (~2-3 chunks), "
                  f"{len(held)} held-out docs (~8 chunks), tiny model in {init}")

    sft_dir = out / "sft_model"
    if not (sft_dir / "config.json").is_file():
        trajs = asyncio.run(teacher_trajectories(train, tok, forget_p=0.6, seed=seed))
        model = load_model(str(init), device="cpu")
        with console.status("SFT warm start on the sloppy teacher's trajectories"):
            losses = sft(model, trajs, epochs=12, lr=3e-3, batch_rows=64, pad_id=tok.pad_token_id, seed=seed)
        console.print(f"warm start: {len(losses)} SFT steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
        export_model(model, tok, sft_dir)
    before = asyncio.run(accuracy(load_model(str(sft_dir), device="cpu"), tok, held))
    console.print(f"held-out accuracy after warm start: [bold]{before:.1f}%[/bold]")

    cfg = MemRLConfig.model_validate({
        "model": {"path": str(sft_dir)},
        "data": {"train_file": str(train_file), "eval_file": str(held_file)},
        "workflow": WORKFLOW,
        "sampling": {"temperature": 1.0},
        "algorithm": {"adv_estimator": "grpo", "n": 8, "loss_agg_mode": "token-mean"},
        "trainer": {"lr": 2e-4, "total_steps": rl_steps, "prompts_per_step": 8, "save_every": 10,
                    "eval_every": 10, "eval_samples": 32, "seed": seed, "output_dir": str(out / "rl"),
                    "micro_batch_tokens": 32768},
        "engine": {"max_batch_size": 64, "device": "cpu"},
    })
    trainer = Trainer(cfg, tracker_console=console)
    trainer.run()
    after = asyncio.run(accuracy(trainer.policy, tok, held))
    curve = plot_run(out / "rl", keys=("reward", "eval/accuracy", "response_tokens", "grad_norm"))
    summary = {"heldout_before": before, "heldout_after": after, "lift": after - before,
               "seconds": time.perf_counter() - t0, "rl_steps": rl_steps}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(f"held-out accuracy (docs ~3x longer than training): [bold]{before:.1f}% -> {after:.1f}%[/bold] "
                  f"({after - before:+.1f} points) in {summary['seconds']:.0f} s; reward curve: {curve}")
    return summary
