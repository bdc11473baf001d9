"""One command that measures memrl on a GPU: ``make gpu-check`` (no network, nothing to download).

Usage:
    python bench/gpu_check.py             # on the GPUs of this machine; prints one table, writes it to
                                          # bench/results/gpu-<date>.md
    python bench/gpu_check.py --dry-run   # the plan: what would be measured here, and how
    python bench/gpu_check.py --smoke     # the same code on the CPU at a 5M-parameter shape (plumbing test)

Models are random weights of named published shapes (``bench/real_shapes.py``) with memrl's
local tokenizer; the GRPO steps run the MemAgent workflow on ``memrl demo``'s needle task.
Each section runs in a process of its own (a failed one is a row saying so, not a crash).
On a machine without a CUDA GPU it prints one line saying so and measures nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).parent


def grpo_setup(tmp: Path, device: str, hidden: int, layers: int, steps: int) -> dict:
    """A random Qwen2-style model (``hidden`` x ``layers``) and a needle task in ``tmp``; returns the raw config
    (``bench/gpu_scaleout.py`` builds its runs on it)."""
    from memrl.data import write_samples
    from memrl_demo.needle import make_split, tokenizer_corpus
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


def sections(gpus: int, vllm: bool, smoke: bool) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, what it measures, keyword arguments of its function in gpu_sections) for this machine."""
    small, large = ("tiny-5m", "tiny-5m") if smoke else ("qwen2.5-0.5b", "qwen2.5-1.5b")
    device, dtype = ("cpu", "float32") if smoke else ("cuda", "bfloat16")
    base = {"device": device, "dtype": dtype, "smoke": smoke}
    out: list[tuple[str, str, dict[str, Any]]] = [
        ("generation", f"HF{' and vLLM' if vllm else ''} generation tokens/s at 1/8/64 concurrent requests "
         f"({small}, prompt 512 + 128 new tokens) and % of the bound set by the device's copy bandwidth",
         {"fn": "generation", "shape": small, **base}),
        ("sync", f"weight sync into vLLM per path ({'ipc, shm, bytes' if not smoke else 'shm, bytes'}"
         f"{', nccl from a second GPU' if gpus > 1 else ''}), {small}: s/sync and GB/s beside a device memcpy"
         if vllm else "weight sync: skipped (vLLM not installed)",
         {"fn": "weight_sync", "shape": small, **base}),
    ]
    for shape in dict.fromkeys((small, large)):
        for lora in (True, False):
            out.append((f"grpo-{shape}-{'lora' if lora else 'full'}",
                        f"one MemAgent GRPO step, {shape}, {'LoRA' if lora else 'full fine-tuning'}, HF engine: "
                        "rollout/logprob/update/sync seconds, peak GPU memory, engine-vs-trainer log-prob mismatch",
                        {"fn": "grpo_step", "shape": shape, "lora": lora, **base}))
    out.append((f"async-{small}", f"sync vs async (staleness 1, interrupt), {small}, LoRA, HF engine beside the "
                "trainer on one device: trained tokens/s over steps 2-5 and the time split",
                {"fn": "async_overlap", "shape": small, **base}))
    if vllm:
        out.append((f"grpo-{small}-lora-vllm", f"the same step, {small}, LoRA, in-process vLLM engine (colocated): "
                    "its time split and engine-vs-trainer mismatch",
                    {"fn": "grpo_step", "shape": small, "lora": True, "engine": "vllm", **base}))
    if gpus > 1:
        out.append(("fsdp", f"one GRPO step, {small}, full fine-tuning, FSDP over NCCL on {gpus} GPUs",
                    {"fn": "grpo_step", "shape": small, "lora": False, "gpus": gpus, **base}))
    else:
        out.append(("fsdp", "FSDP over NCCL: skipped (one GPU)",
                    {"fn": "skipped", "check": "FSDP over NCCL", "why": "skipped: needs two or more GPUs"}))
    return out


def run_section(name: str, spec: dict[str, Any], timeout: int) -> list[dict[str, str]]:
    """Run one section in a fresh process; a failure or timeout becomes a row."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--section-json", json.dumps(spec), "--out", out.name]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return [{"check": name, "setting": "", "result": f"FAILED: over {timeout} s"}]
        if proc.returncode != 0:
            from gpu_sections import failure_tail

            return [{"check": name, "setting": "", "result": f"FAILED: {failure_tail(proc.stderr)}"}]
        return json.loads(Path(out.name).read_text())


def render(rows: list[dict[str, str]], header: str) -> str:
    lines = [header, "", "| check | setting | result |", "|---|---|---|"]
    lines += [f"| {r['check']} | {r['setting']} | {r['result']} |" for r in rows]
    return "\n".join(lines)


def device_header(smoke: bool) -> str:
    import platform

    if smoke:
        return f"memrl gpu-check (smoke run on the CPU: {platform.machine()}, torch {torch.__version__})"
    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    return (f"memrl gpu-check, {datetime.date.today()}: {torch.cuda.device_count()} x {', '.join(names)}; "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--smoke", action="store_true", help="run every section on the CPU at a 5M-parameter shape")
    ap.add_argument("--only", help="comma-separated section names (see --dry-run)")
    ap.add_argument("--results", default=str(HERE / "results"), help="folder for gpu-<date>.md")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per section")
    ap.add_argument("--section-json", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.section_json:  # a child: run one section, write its rows
        spec = json.loads(args.section_json)
        import gpu_sections

        rows = getattr(gpu_sections, spec.pop("fn"))(**spec)
        Path(args.out).write_text(json.dumps(rows))
        return 0
    cuda = torch.cuda.is_available()
    if not cuda and not (args.dry_run or args.smoke):
        print("gpu-check: no CUDA GPU found on this machine (torch.cuda.is_available() is False); nothing measured")
        return 0
    from gpu_sections import has_vllm

    plan = sections(torch.cuda.device_count() if cuda else 1, has_vllm(), smoke=args.smoke)
    if args.only:
        keep = set(args.only.split(","))
        plan = [p for p in plan if p[0] in keep]
    if args.dry_run:
        where = ("the CPU (--smoke)" if args.smoke else "this machine" if cuda else
                 "one CUDA GPU (none here; with this machine's packages)")
        print(f"gpu-check plan for {where}; each section in a process of its own, at most {args.timeout} s:")
        for i, (name, what, _) in enumerate(plan, 1):
            print(f"{i}. {name}: {what}")
        print(f"then one table, printed and written to {Path(args.results) / f'gpu-{datetime.date.today()}.md'}")
        return 0
    rows: list[dict[str, str]] = []
    out = Path(args.results) / f"gpu-{datetime.date.today()}.md"
    for name, _, spec in plan:
        print(f"gpu-check: {name} ...", file=sys.stderr, flush=True)
        rows += run_section(name, dict(spec), args.timeout)
        if not args.smoke:  # after every section, so a run cut short keeps what it measured
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(render(rows, device_header(args.smoke)) + "\n")
    print(render(rows, device_header(args.smoke)))
    if not args.smoke:
        print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
