"""memrl's GRPO trainer next to TRL's GRPOTrainer on the same model, prompts, reward and batch shape.

Usage (TRL is a bench-only dependency, in a venv of its own)::

    python3 -m venv .venv-trl
    .venv-trl/bin/pip install torch==2.13.0          # the same torch as memrl's venv
    .venv-trl/bin/pip install -e . trl
    .venv-trl/bin/python bench/peer_trl.py [--steps 4] [--rounds 2] [--vocab 151936]

One randomly initialised Qwen2 model (~5M parameters with the tiny 512-token
vocabulary; ``--vocab 151936`` gives it a Qwen-sized embedding and LM head,
tied, to show where the logits' memory goes) and one prompt set are built once.
Both trainers then run the same step: 8 prompts x 8 completions, 64 new tokens
at temperature 1 (stop at EOS), the same reward function on the decoded text,
no KL term, one PPO epoch over one mini-batch in 4 micro-batches, float32 on
the CPU, the same learning rate and grad-norm clip, gradient checkpointing off
on both sides (``--checkpointing``: on on both; TRL's GRPOConfig turns it on
by default, which trades its update time for memory).

Each framework runs in a subprocess of its own (so its peak RSS is its own),
interleaved memrl/TRL/memrl/TRL over ``--rounds`` rounds; the first step of
each subprocess is a warm-up and is not counted. Printed: median s/step, the
rollout/update split, generated tokens/s, peak RSS, and TRL/memrl ratios. CPU s/step
(the process's CPU time, every thread) is steadier than wall time when other
jobs share the machine.
On a shared machine the numbers are indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORDS = ("the of and to in is was for on are with as at by from this that which memory answer question document "
         "paris france capital value key blue red green number one two three four five six seven").split()


def reward_text(text: str) -> float:
    """The shared reward: how often the letter 'e' occurs (varies between samples, so advantages are non-zero)."""
    return min(1.0, text.count("e") / 16.0)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# -- setup (parent) ---------------------------------------------------------------------------------
def build(out: Path, vocab: int, prompts: int, prompt_tokens: int) -> tuple[Path, Path]:
    """A ~5M-parameter Qwen2 (tied embeddings) + tokenizer folder, and a JSONL of prompts of ``prompt_tokens``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from memrl.models.tiny import build_hf_tokenizer

    tok = build_hf_tokenizer()
    config = Qwen2Config(vocab_size=max(vocab, len(tok)), hidden_size=256, intermediate_size=688,
                         num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model_dir = out / "model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    from memrl.data import LongContextSample, write_samples

    rng = random.Random(0)
    samples = []
    for i in range(prompts):
        text = " ".join(rng.choice(WORDS) for _ in range(prompt_tokens * 2))
        ids = tok(text, add_special_tokens=False)["input_ids"][:prompt_tokens]
        samples.append(LongContextSample(index=i, question="q", answers=["e"], context=tok.decode(ids), num_docs=1))
    data = out / "prompts.jsonl"
    write_samples(samples, data, fmt="jsonl")
    return model_dir, data


# -- memrl (child) ----------------------------------------------------------------------------------
def memrl_trainer(a: argparse.Namespace) -> Any:
    """memrl's Trainer in the bench's setting, its workflow replaced by TRL's single-turn completion."""
    from memrl.config import MemRLConfig
    from memrl.train.trainer import Trainer
    from memrl.workflows.api import Episode, Workflow

    row_tokens = a.prompt_tokens + a.new_tokens
    rows_per_micro = a.prompts_per_step * a.group // a.micro_batches
    cfg = MemRLConfig.model_validate({
        "model": {"path": str(a.model), "dtype": "float32"},
        "data": {"train_file": str(a.data)},
        "algorithm": {"n": a.group, "kl_coef": 0.0, "ppo_epochs": 1, "loss_agg_mode": "token-mean"},
        "sampling": {"temperature": 1.0},
        "trainer": {"lr": a.lr, "total_steps": a.steps + 1, "prompts_per_step": a.prompts_per_step,
                    "mini_batches": 1, "micro_batch_tokens": rows_per_micro * row_tokens, "grad_clip": 1.0,
                    "save_every": 10_000, "output_dir": str(a.workdir / "memrl_run"), "seed": 0,
                    "gradient_checkpointing": a.checkpointing},
        "engine": {"kind": "hf", "device": "cpu", "max_batch_size": a.prompts_per_step * a.group},
    })

    class SingleTurn(Workflow):
        """TRL's setting: the raw prompt text, tokenised without special tokens, one completion."""

        async def run(self, ep: Episode) -> None:
            prompt = ep.tokenizer(ep.sample["context"], add_special_tokens=False)["input_ids"]
            text = await ep.generate(prompt, max_new_tokens=a.new_tokens)  # stops at the end token
            ep.reward(reward_text(str(text)))

    trainer = Trainer(cfg, workflow=SingleTurn())
    return trainer


def run_memrl(a: argparse.Namespace) -> list[dict[str, float]]:
    trainer = memrl_trainer(a)
    steps = []
    for _ in range(a.steps + 1):
        trainer.step += 1
        t0, c0 = time.perf_counter(), time.process_time()
        m = trainer.train_step()
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        gen = m["tokens_per_s"] * m["time/rollout"]
        steps.append({"step_s": total, "cpu_s": cpu, "rollout_s": m["time/rollout"],
                      "update_s": m["time/logprob"] + m["time/update"], "gen_tokens": gen,
                      "tokens_per_s": m["tokens_per_s"], "reward": m.get("reward", 0.0)})
    trainer.tracker.close()
    return steps


# -- TRL (child) ------------------------------------------------------------------------------------
def run_trl(a: argparse.Namespace) -> list[dict[str, float]]:
    import dataclasses

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from memrl.data import read_samples

    prompts = [s.context for s in read_samples(a.data)]
    dataset = Dataset.from_dict({"prompt": prompts})
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    per_device = a.prompts_per_step * a.group // a.micro_batches
    wanted = {"output_dir": str(a.workdir / "trl_run"), "per_device_train_batch_size": per_device,
              "gradient_accumulation_steps": a.micro_batches, "num_generations": a.group,
              "max_completion_length": a.new_tokens, "max_prompt_length": None, "temperature": 1.0,
              "top_p": 1.0, "top_k": 0, "beta": 0.0, "num_iterations": 1, "learning_rate": a.lr,
              "max_grad_norm": 1.0, "lr_scheduler_type": "constant", "warmup_steps": 0, "warmup_ratio": 0.0,
              "max_steps": a.steps + 1, "logging_steps": 1, "save_strategy": "no", "report_to": "none",
              "use_cpu": True, "bf16": False, "fp16": False, "seed": 0, "loss_type": "dapo",
              "dataloader_num_workers": 0, "log_completions": False, "disable_tqdm": True,
              "gradient_checkpointing": a.checkpointing}  # TRL's GRPOConfig turns it on unless told
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    args = GRPOConfig(**{k: v for k, v in wanted.items() if k in names})

    def reward(completions: list[str], **_: Any) -> list[float]:
        return [reward_text(c) for c in completions]

    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                          processing_class=tok)
    record: dict[str, float] = {"rollout_s": 0.0, "gen_tokens": 0.0}
    real = trainer._generate_and_score_completions

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = real(*args, **kwargs)
        record["rollout_s"] += time.perf_counter() - t0
        record["gen_tokens"] += float(out["completion_mask"].sum())
        return out

    trainer._generate_and_score_completions = timed  # type: ignore[method-assign]
    steps: list[dict[str, float]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            record.update(t0=time.perf_counter(), c0=time.process_time(), rollout_s=0.0, gen_tokens=0.0)

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            total = time.perf_counter() - record["t0"]
            roll = record["rollout_s"]
            steps.append({"step_s": total, "cpu_s": time.process_time() - record["c0"], "rollout_s": roll,
                          "update_s": total - roll,
                          "gen_tokens": record["gen_tokens"], "tokens_per_s": record["gen_tokens"] / max(roll, 1e-9)})

    trainer.add_callback(Clock())
    trainer.train()
    return steps


# -- driver (parent) --------------------------------------------------------------------------------
def child(a: argparse.Namespace) -> None:
    steps = run_memrl(a) if a.child == "memrl" else run_trl(a)
    Path(a.result).write_text(json.dumps({"steps": steps, "peak_rss_mib": peak_rss_mib()}))


def summarise(name: str, runs: list[dict[str, Any]]) -> dict[str, float]:
    steps = [s for r in runs for s in r["steps"][1:]]  # the first step of every subprocess is a warm-up
    med = {k: statistics.median(s[k] for s in steps) for k in ("step_s", "cpu_s", "rollout_s", "update_s",
                                                                 "tokens_per_s")}
    med["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    med["steps"] = float(len(steps))
    return med


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4, help="timed steps per subprocess (after one warm-up step)")
    p.add_argument("--rounds", type=int, default=2, help="memrl/TRL subprocess pairs, interleaved")
    p.add_argument("--vocab", type=int, default=0, help="vocabulary size (0: the tiny tokenizer's, 512)")
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=200)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--checkpointing", action="store_true",
                   help="gradient checkpointing on both sides (default: off on both; TRL's own default is on)")
    p.add_argument("--only", choices=("memrl", "trl"), default=None, help="run one side only")
    p.add_argument("--child", choices=("memrl", "trl"), help=argparse.SUPPRESS)
    p.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if a.child:
        return child(a)
    with tempfile.TemporaryDirectory(prefix="peer_trl_") as tmp:
        work = Path(tmp)
        model_dir, data = build(work, a.vocab, 64, a.prompt_tokens)
        import json as _json

        cfg = _json.loads((model_dir / "config.json").read_text())
        sides = [a.only] if a.only else ["memrl", "trl"]
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
        for r in range(a.rounds):
            for side in sides:
                result = work / f"{side}_{r}.json"
                cmd = [sys.executable, __file__, "--child", side, "--model", str(model_dir), "--data", str(data),
                       "--workdir", str(work / f"{side}_{r}"), "--result", str(result), "--steps", str(a.steps),
                       "--prompts-per-step", str(a.prompts_per_step), "--group", str(a.group),
                       "--prompt-tokens", str(a.prompt_tokens), "--new-tokens", str(a.new_tokens),
                       "--micro-batches", str(a.micro_batches), "--lr", str(a.lr)]
                cmd += ["--checkpointing"] if a.checkpointing else []
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    sys.exit(f"{side} round {r} failed:\n{proc.stderr[-4000:]}")
                runs[side].append(json.loads(result.read_text()))
                walls = " ".join(f"{s['step_s']:.2f}" for s in runs[side][-1]["steps"][1:])
                print(f"round {r + 1}/{a.rounds} {side}: {time.perf_counter() - t0:.1f} s; timed steps {walls} s",
                      flush=True)
        import torch

        print(f"\nmodel: Qwen2 hidden {cfg['hidden_size']} x {cfg['num_hidden_layers']} layers, vocab "
              f"{cfg['vocab_size']}; {a.prompts_per_step} prompts x {a.group} completions, {a.prompt_tokens}-token "
              f"prompts, {a.new_tokens} new tokens, {a.micro_batches} micro-batches, float32, torch "
              f"{torch.__version__}, {torch.get_num_threads()} threads, gradient checkpointing "
              f"{'on' if a.checkpointing else 'off'} on both sides")
        summary = {side: summarise(side, rs) for side, rs in runs.items()}
        keys = (("step_s", "s/step"), ("cpu_s", "CPU s/step"), ("rollout_s", "rollout s"), ("update_s", "update s"),
                ("tokens_per_s", "gen tokens/s"), ("peak_rss_mib", "peak RSS MiB"))
        print(f"{'':16}" + "".join(f"{s:>12}" for s in sides) + ("   TRL/memrl" if len(sides) == 2 else ""))
        for key, label in keys:
            line = f"{label:16}" + "".join(f"{summary[s][key]:12.2f}" for s in sides)
            if len(sides) == 2:
                line += f"{summary['trl'][key] / max(summary['memrl'][key], 1e-9):12.2f}"
            print(line)
        print(f"(medians over {int(summary[sides[0]]['steps'])} timed steps per side; peak RSS: max over rounds)")


if __name__ == "__main__":
    main()
