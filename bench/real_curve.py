"""A real learning curve: SmolLM2-135M-Instruct trained with MemAgent GRPO on RULER niah_single_1.

The task: a 2-4K-token haystack hides "One of the special magic numbers for <key> is: <7 digits>."; the
question asks for that number. MemAgent reads the haystack in chunks, keeps a memory, and answers in a
final turn. The reward is 1 when the last number of at least five digits in the final answer is the needle
(``workflow.answer_format=regex:...``, ``workflow.reward=em``). With MemAgent's generic prompts SmolLM2
copies the haystack's first sentences into its memory and never finds a needle (0/8 at 2K tokens), so
nothing could be learnt; the prompts below ask for the sentence that answers the question and to keep the
notes when a chunk has none. With them the needle is found in the chunk that holds it, and what remains
to learn is keeping it through the chunks that do not: the reward is mixed within groups.

Prints the held-out accuracy (greedy, the same reward, on needles and haystacks never trained on) before
and after training, the mean training reward per step, and the wall time. ``--setting cpu`` is a reduced
run for a 2-core machine (2K tokens in two chunks, LoRA, a few steps); ``--setting full`` is the run to make
on a GPU (4K tokens in two chunks, full fine-tuning, more prompts, episodes and steps). Report what it
prints, whichever it shows.

    make smol && python bench/real_curve.py --setting cpu
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SETTINGS: dict[str, dict[str, Any]] = {
    # length, chunk, train / held-out samples, prompts per step, episodes per prompt, steps, LoRA, lr, budgets.
    # Rollouts at temperature 0.7: at 1.0 this 135M model never wrote a number (0/8 episodes of the first
    # step), so every group was all zeros; greedy finds 62.5% of the held-out needles.
    "cpu": {"length": "2k", "chunk": 1024, "train": 16, "heldout": 16, "prompts": 2, "n": 4, "steps": 8,
            "lora": True, "lr": 2e-4, "memory": 40, "final": 24, "temperature": 0.7},
    "full": {"length": "4k", "chunk": 2048, "train": 256, "heldout": 64, "prompts": 16, "n": 8, "steps": 60,
             "lora": False, "lr": 2e-6, "memory": 128, "final": 48, "temperature": 0.7},
}
TASK = "niah_single_1"
PROMPTS = {
    "memory": "Read the text below and find the sentence that answers the question.\n\nQuestion: {question}\n\n"
              "Notes so far: {memory}\n\nText:\n{chunk}\n\nQuestion: {question}\nCopy the sentence from the text "
              "that contains the answer, word for word. If the text does not contain it, repeat the notes so far.",
    "final": "Question: {question}\n\nNotes: {memory}\n\nAnswer the question using the notes. Put the number "
             "inside \\boxed{}.",
    "no_memory": "none",
}
ANSWER = r"regex:(\d{5,})"  # the last long number in the final answer


def make_data(out: Path, length: str, samples: int, seed: int) -> Path:
    """``memrl data ruler`` with SmolLM2's tokenizer: one file of ``samples`` needles at ``length`` tokens."""
    subprocess.run([sys.executable, "-m", "memrl.cli.main", "data", "ruler", "--out", str(out), "--tokenizer",
                    "smollm2-135m-instruct", "--lengths", length, "--tasks", TASK, "--samples", str(samples),
                    "--seed", str(seed)], check=True, capture_output=True, text=True)
    (found,) = out.glob(f"ruler_{TASK}_*.jsonl")
    return found


def config(s: dict[str, Any], train: Path, heldout: Path, run: Path, seed: int) -> Any:
    import yaml

    from memrl.config import MemRLConfig

    prompts = run.parent / "prompts.yaml"
    prompts.write_text(yaml.safe_dump(PROMPTS), encoding="utf-8")
    return MemRLConfig.model_validate({
        "model": {"path": "smollm2-135m-instruct"},
        "data": {"train_file": str(train), "eval_file": str(heldout)},
        "workflow": {"name": "memagent", "chunk_tokens": s["chunk"], "memory_tokens": s["memory"],
                     "final_tokens": s["final"], "reward": "em", "answer_format": ANSWER, "prompts": str(prompts)},
        "sampling": {"temperature": s["temperature"], "top_p": 0.95},
        "algorithm": {"adv_estimator": "grpo", "n": s["n"], "kl_coef": 0.0},
        "lora": {"enabled": s["lora"], "r": 16, "alpha": 32},
        "trainer": {"lr": s["lr"], "warmup_steps": 0, "prompts_per_step": s["prompts"], "total_steps": s["steps"],
                    "eval": {"every": s["steps"], "samples": s["heldout"]}, "save_every": 10_000, "seed": seed,
                    # 4,096 tokens x a 49,152-token vocabulary: ~0.8 GB of logits per pass (the default 16,384
                    # took the process past 24 GB on CPU)
                    "micro_batch_tokens": 4096,
                    "rollouts_every": 0, "output_dir": str(run)},
    })


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setting", choices=sorted(SETTINGS), default="cpu")
    p.add_argument("--steps", type=int, help="override the setting's number of GRPO steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, default=Path("runs/real_curve"))
    args = p.parse_args()
    s = dict(SETTINGS[args.setting], **({"steps": args.steps} if args.steps else {}))

    import shutil

    from memrl.train.trainer import Trainer

    work = args.work / args.setting
    train = make_data(work / "train", s["length"], s["train"], seed=1000 + args.seed)
    heldout = make_data(work / "heldout", s["length"], s["heldout"], seed=2000 + args.seed)
    run = work / f"run_seed{args.seed}"
    shutil.rmtree(run, ignore_errors=True)
    print(f"real_curve {args.setting}: SmolLM2-135M-Instruct, MemAgent GRPO on RULER {TASK} at {s['length']} "
          f"tokens (chunks of {s['chunk']}), {s['prompts']} prompts x {s['n']} episodes per step, {s['steps']} steps, "
          f"{'LoRA r=16' if s['lora'] else 'full fine-tuning'}, lr {s['lr']}, {s['train']} training / "
          f"{s['heldout']} held-out needles", flush=True)
    t0 = time.perf_counter()
    Trainer(config(s, train, heldout, run, args.seed)).run()
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    rewards = [(r["step"], r["reward"]) for r in rows if "reward" in r]
    print("reward per step: " + ", ".join(f"{k}: {v:.2f}" for k, v in rewards))
    (s0, before), (s1, after) = evals[0], evals[-1]
    print(f"held-out accuracy: {before:.1f}% (step {s0}) -> {after:.1f}% (step {s1}), "
          f"{after - before:+.1f} points on {s['heldout']} needles; {wall / 60:.1f} min")


if __name__ == "__main__":
    main()
