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

``--setting gpu`` is the run for one lent GPU (``make gpu-check GPU_ONLY=curve``): 4K tokens in two 2K
chunks, 64 held-out needles, LoRA and full fine-tuning for seeds 0-2, as many as fit ``--budget-s`` (a run
starts only if the last run of its kind says it ends in time); float32, because bf16 weights round an
Adam step of lr 1e-5 away. Its rows go to ``bench/results/gpu-<date>.md`` after every run.

    make smol && python bench/real_curve.py --setting cpu
    python bench/real_curve.py --setting gpu            # on a GPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LR = {"lora": 2e-4, "full": 1e-5}  # a kind a setting does not list (--modes)

SETTINGS: dict[str, dict[str, Any]] = {
    # length, chunk, train / held-out samples, prompts per step, episodes per prompt, steps, modes (lora/full)
    # with their lr, seeds, memory/final budgets, dtype, trainer micro-batch, engine batch, time budget.
    # Rollouts at temperature 0.7: at 1.0 this 135M model never wrote a number (0/8 episodes of the first
    # step), so every group was all zeros; greedy finds 62.5% of the held-out needles.
    "cpu": {"length": "2k", "chunk": 1024, "train": 16, "heldout": 16, "prompts": 2, "n": 4, "steps": 8,
            "modes": {"lora": 2e-4}, "seeds": (0,), "memory": 40, "final": 24, "temperature": 0.7,
            # 4,096 tokens x a 49,152-token vocabulary: ~0.8 GB of logits per pass (the default 16,384
            # took the process past 24 GB on CPU)
            "micro_batch_tokens": 4096, "dtype": "auto", "max_batch_size": 32, "budget_s": None},
    "full": {"length": "4k", "chunk": 2048, "train": 256, "heldout": 64, "prompts": 16, "n": 8, "steps": 60,
             "modes": {"full": 2e-6}, "seeds": (0,), "memory": 128, "final": 48, "temperature": 0.7,
             "micro_batch_tokens": 4096, "dtype": "auto", "max_batch_size": 32, "budget_s": None},
    # One lent GPU, at most 8 minutes: estimated ~7 s per step (64 episodes of three turns, static decode at
    # 64 in flight, 300K trained tokens) + ~25 s per run (load, two evaluations), so seed 0 of both kinds
    # fits for sure and seeds 1-2 as time allows.
    "gpu": {"length": "4k", "chunk": 2048, "train": 256, "heldout": 64, "prompts": 8, "n": 8, "steps": 12,
            "modes": {"lora": 2e-4, "full": 1e-5}, "seeds": (0, 1, 2), "memory": 48, "final": 32,
            "temperature": 0.7, "micro_batch_tokens": 16384, "dtype": "float32", "max_batch_size": 64,
            "budget_s": 450, "tf32": True},
    # --smoke of gpu_check: the code path in minutes on a CPU
    "smoke": {"length": "2k", "chunk": 1024, "train": 4, "heldout": 2, "prompts": 1, "n": 2, "steps": 1,
              "modes": {"lora": 2e-4}, "seeds": (0,), "memory": 16, "final": 8, "temperature": 0.7,
              "micro_batch_tokens": 4096, "dtype": "auto", "max_batch_size": 8, "budget_s": None},
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


def config(s: dict[str, Any], mode: str, train: Path, heldout: Path, run: Path, seed: int, decode: str) -> Any:
    import yaml

    from memrl.config import MemRLConfig

    prompts = run.parent / "prompts.yaml"
    prompts.parent.mkdir(parents=True, exist_ok=True)
    prompts.write_text(yaml.safe_dump(PROMPTS), encoding="utf-8")
    return MemRLConfig.model_validate({
        "model": {"path": "smollm2-135m-instruct", "dtype": s["dtype"]},
        "data": {"train_file": str(train), "eval_file": str(heldout)},
        "workflow": {"name": "memagent", "options": {
            "chunk_tokens": s["chunk"], "memory_tokens": s["memory"], "final_tokens": s["final"], "reward": "em",
            "answer_format": ANSWER, "prompts": str(prompts)}},
        "sampling": {"temperature": s["temperature"], "top_p": 0.95},
        "algorithm": {"adv_estimator": "grpo", "n": s["n"], "kl_coef": 0.0},
        "lora": {"enabled": mode == "lora", "r": 16, "alpha": 32},
        "engine": {"decode": decode, "max_batch_size": s["max_batch_size"]},
        "trainer": {"lr": s["modes"][mode], "warmup_steps": 0, "prompts_per_step": s["prompts"],
                    "total_steps": s["steps"], "eval": {"every": s["steps"], "samples": s["heldout"]},
                    "save_every": 10_000, "seed": seed, "micro_batch_tokens": s["micro_batch_tokens"],
                    "rollouts_every": 0, "output_dir": str(run)},
    })


def train_once(s: dict[str, Any], mode: str, seed: int, data: tuple[Path, Path], work: Path,
               decode: str) -> dict[str, Any]:
    """One GRPO run; its held-out accuracy before and after, reward per step and wall time."""
    import shutil

    from memrl.train.trainer import Trainer

    run = work / f"run_{mode}_seed{seed}"
    shutil.rmtree(run, ignore_errors=True)
    t0 = time.perf_counter()
    Trainer(config(s, mode, *data, run, seed, decode)).run()
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    return {"mode": mode, "seed": seed, "wall": wall, "evals": evals,
            "rewards": [(r["step"], r["reward"]) for r in rows if "reward" in r]}


def report(s: dict[str, Any], r: dict[str, Any]) -> dict[str, str]:
    """Print one run's curve and held-out accuracy; its table row."""
    (s0, before), (s1, after) = r["evals"][0], r["evals"][-1]
    curve = ", ".join(f"{k}: {v:.2f}" for k, v in r["rewards"])
    kind = "LoRA r=16" if r["mode"] == "lora" else "full fine-tuning"
    print(f"[{kind}, seed {r['seed']}] reward per step: {curve}")
    print(f"[{kind}, seed {r['seed']}] held-out accuracy: {before:.1f}% (step {s0}) -> {after:.1f}% (step {s1}), "
          f"{after - before:+.1f} points on {s['heldout']} needles; {r['wall'] / 60:.1f} min", flush=True)
    return {"check": "SmolLM2-135M-Instruct learning curve",
            "setting": f"MemAgent GRPO, RULER {TASK} {s['length']} in chunks of {s['chunk']}, {kind}, lr "
                       f"{s['modes'][r['mode']]}, seed {r['seed']}, {s['prompts']} prompts x {s['n']} x "
                       f"{len(r['rewards'])} steps",
            "result": f"held-out {before:.1f}% -> {after:.1f}% ({after - before:+.1f} points, {s['heldout']} "
                      f"needles, greedy); reward per step {' '.join(f'{v:.2f}' for _, v in r['rewards'])}; "
                      f"{r['wall'] / 60:.1f} min"}


def free_device_memory() -> None:
    """Free what a finished run held: an engine's worker tasks keep it (and the policy) in a reference cycle,
    which only the cyclic garbage collector breaks."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_setting(name: str, steps: int | None = None, seeds: tuple[int, ...] | None = None,
                modes: tuple[str, ...] | None = None, budget_s: float | None = None, results: Path | None = None,
                work: Path = Path("runs/real_curve"), decode: str = "auto") -> list[dict[str, str]]:
    """Every (seed, mode) run of setting ``name`` that fits ``budget_s``, seed by seed; the table rows, written
    to ``results``/gpu-<date>.md after each run when given."""
    s = dict(SETTINGS[name], **({"steps": steps} if steps else {}))
    budget = budget_s if budget_s is not None else s["budget_s"]
    modes = modes or tuple(s["modes"])
    print(f"real_curve {name}: SmolLM2-135M-Instruct, MemAgent GRPO on RULER {TASK} at {s['length']} tokens "
          f"(chunks of {s['chunk']}), {s['prompts']} prompts x {s['n']} episodes per step, {s['steps']} steps, "
          f"{' and '.join(modes)}, seeds {list(seeds or s['seeds'])}, {s['train']} training / {s['heldout']} "
          f"held-out needles, {s['dtype']}" + (f", at most {budget:.0f} s" if budget else ""), flush=True)
    if s.get("tf32"):  # float32 weights (see above), TensorFloat-32 matrix products on a GPU: ~8x faster
        import torch

        torch.set_float32_matmul_precision("high")
    t0 = time.perf_counter()
    dest = work / name
    data = (make_data(dest / "train", s["length"], s["train"], seed=1000),
            make_data(dest / "heldout", s["length"], s["heldout"], seed=2000))
    rows: list[dict[str, str]] = []
    took: dict[str, float] = {}
    for seed in seeds or s["seeds"]:
        for mode in modes:
            guess = took.get(mode, max(took.values(), default=0.0))
            if budget and time.perf_counter() - t0 + guess > budget:
                print(f"[{mode}, seed {seed}] not started: ~{guess:.0f} s would end past the {budget:.0f} s budget")
                continue
            r = train_once(s, mode, seed, data, dest, decode)
            free_device_memory()  # the run's policy, optimizer and cache pools, before the next run's
            took[mode] = r["wall"]
            rows.append(report(s, r))
            if results is not None:
                import gpu_check

                gpu_check.write_table(results / f"gpu-{datetime.date.today()}.md", rows, gpu_check.device_header(False))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setting", choices=sorted(SETTINGS), default="cpu")
    p.add_argument("--steps", type=int, help="override the setting's number of GRPO steps")
    p.add_argument("--seeds", help="comma-separated seeds (default: the setting's)")
    p.add_argument("--seed", type=int, help="one seed (the same as --seeds N)")
    p.add_argument("--modes", help="comma-separated: lora, full (default: the setting's)")
    p.add_argument("--budget-s", type=float, help="start no run that would end past this many seconds")
    p.add_argument("--decode", default="auto", choices=("auto", "eager", "static"), help="engine.decode")
    p.add_argument("--results", type=Path, help="folder whose gpu-<date>.md gets the rows after every run "
                   "(default for --setting gpu: bench/results)")
    p.add_argument("--work", type=Path, default=Path("runs/real_curve"))
    args = p.parse_args()
    seeds = tuple(int(x) for x in args.seeds.split(",")) if args.seeds else (args.seed,) if args.seed is not None \
        else None
    modes = tuple(args.modes.split(",")) if args.modes else None
    if modes:
        SETTINGS[args.setting]["modes"] = {m: SETTINGS[args.setting]["modes"].get(m, LR[m]) for m in modes}
    results = args.results or (HERE / "results" if args.setting == "gpu" else None)
    run_setting(args.setting, args.steps, seeds, modes, args.budget_s, results, args.work, args.decode)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
