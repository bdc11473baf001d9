"""CUDA checks: bf16 engine throughput and GRPO steps (LoRA + gradient checkpointing) on one GPU.

Usage: python bench/gpu_check.py [--device cuda] [--hidden 1024] [--layers 12] [--steps 4]
Prints the device, engine tokens/s at 1/8/32 concurrent requests, and per-step training metrics
(time split, engine-vs-trainer log-prob mismatch in bf16, grad norm, peak GPU memory).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def grpo_setup(tmp: Path, device: str, hidden: int, layers: int, steps: int) -> dict:
    """A random Qwen2-style model (``hidden`` x ``layers``) and a needle task in ``tmp``; returns the raw config."""
    from memrl.data import write_samples
    from memrl.demo.needle import make_split, tokenizer_corpus
    from memrl.models.tiny import build_tiny_model

    cuda = device.startswith("cuda")
    build_tiny_model(tmp / "model", tokenizer_corpus(), vocab_size=600, hidden_size=hidden, num_layers=layers,
                     num_heads=hidden // 64, num_kv_heads=max(hidden // 256, 1), intermediate_size=4 * hidden,
                     max_position_embeddings=8192)
    write_samples(make_split(1, 64, (20, 40)), tmp / "train.jsonl", fmt="jsonl")
    return {
        "model": {"path": str(tmp / "model"), "dtype": "bfloat16" if cuda else "float32"},
        "data": {"train_file": str(tmp / "train.jsonl")},
        "workflow": {"chunk_tokens": 128, "memory_tokens": 32, "final_tokens": 16, "reward": "em"},
        "algorithm": {"n": 8, "entropy_coef": 0.01, "kl_coef": 0.001, "clip_ratio_high": 0.28},
        "lora": {"enabled": True, "r": 16},
        "trainer": {"lr": 1e-4, "total_steps": steps, "prompts_per_step": 8, "save_every": 1000,
                    "output_dir": str(tmp / "run"), "gradient_checkpointing": True, "micro_batch_tokens": 65536},
        "engine": {"device": device, "max_batch_size": 64},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    print(f"torch {torch.__version__}; device {torch.cuda.get_device_name(0) if cuda else 'cpu'}; "
          f"bf16 {'yes' if cuda and torch.cuda.is_bf16_supported() else 'no'}", flush=True)

    here = Path(__file__).parent
    subprocess.run([sys.executable, str(here / "engine_throughput.py"), "--device", args.device, "--hidden",
                    str(args.hidden), "--layers", str(args.layers), "--new-tokens", "128", "--prompt-tokens", "512",
                    "--requests", "64"], check=True)

    from memrl.config import MemRLConfig
    from memrl.train.trainer import Trainer

    cfg = MemRLConfig.model_validate(grpo_setup(Path(tempfile.mkdtemp()), args.device, args.hidden, args.layers,
                                                args.steps))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(cfg)
    params = sum(p.numel() for p in trainer.policy.parameters()) / 1e6
    print(f"GRPO: {params:.0f}M params ({next(trainer.policy.parameters()).dtype}), LoRA r=16, grad checkpointing, "
          f"{cfg.trainer.prompts_per_step}x{cfg.algorithm.n} episodes/step", flush=True)
    t0 = time.perf_counter()
    peak = 0.0
    for _ in range(args.steps):
        trainer.step += 1
        m = trainer.train_step()
        print(f"step {trainer.step}: rollout {m['time/rollout']:.2f}s logprob {m['time/logprob']:.2f}s "
              f"update {m['time/update']:.2f}s gen tok/s {m['tokens_per_s']:.0f} rows {m['train_rows']:.0f} "
              f"mismatch {m['logprob_mismatch']:.4f} grad_norm {m['grad_norm']:.3f} kl {m['kl']:.5f}", flush=True)
        peak = max(peak, m.get("gpu_peak_gib", 0.0))  # the trainer resets the peak every step
    print(f"{args.steps} steps in {time.perf_counter() - t0:.1f}s"
          + (f"; peak GPU memory {peak:.2f} GiB" if cuda else ""))


if __name__ == "__main__":
    main()
