"""Scale-out paths on the GPUs of this machine: Ray replicas, FSDP2 over NCCL, colocated placement.

    python bench/gpu_scaleout.py [--hidden 1024] [--layers 12] [--steps 3] [--variants single,fsdp,replicas]

Builds a random bf16 Qwen2-style model (as ``bench/gpu_check.py`` does), then:
1. rollout tokens/s with 1 vs 2 Ray HF replicas sharing the GPUs (``bench/rollout_replicas.py``);
2. GRPO steps (LoRA, gradient checkpointing) through ``memrl train`` in each variant:
   ``single`` one process, the engine is the policy;
   ``fsdp`` torchrun over every GPU with ``cluster.strategy=fsdp`` and NCCL (on one GPU a group of one:
   the sharded path end to end, rank 0's engine copy and the gathered weight sync included);
   ``replicas`` two Ray rollout replicas on the trainer's GPU, ``placement=colocate`` (replicas offload during
   the update).
Prints, per variant, the mean per-step time split, sync time, grad norm and the largest per-step peak GPU memory.
Needs CUDA and, for ``replicas`` and step 1, memrl[ray].
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from gpu_check import grpo_setup  # noqa: E402

VARIANTS = {
    "single": [],
    "fsdp": ["cluster.strategy=fsdp", "cluster.backend=nccl"],
    "replicas": ["cluster.rollout_replicas=2", "cluster.replica_gpus=0.4", "cluster.placement=colocate"],
}


def run_variant(name: str, base: dict, tmp: Path, gpus: int) -> None:
    cfg = json.loads(json.dumps(base))
    cfg["trainer"]["output_dir"] = str(tmp / f"run-{name}")
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cli = ["-m", "memrl.cli.main", "train", str(path), *VARIANTS[name]]
    cmd = [sys.executable, *cli]
    if name == "fsdp":
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={gpus}", *cli]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(f"{name}: FAILED (exit {proc.returncode})\n{proc.stderr[-3000:]}", flush=True)
        return
    rows = [json.loads(x) for x in (tmp / f"run-{name}" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/update" in r]
    mean = lambda k: statistics.fmean(r.get(k, float("nan")) for r in rows)  # noqa: E731
    status = next((ln for ln in proc.stderr.splitlines() + proc.stdout.splitlines() if "ray cluster" in ln), "")
    print(f"{name}: {len(rows)} steps in {wall:.1f}s wall | per step: rollout {mean('time/rollout'):.2f}s "
          f"logprob {mean('time/logprob'):.2f}s update {mean('time/update'):.2f}s sync {mean('time/sync'):.3f}s | "
          f"gen tok/s {mean('tokens_per_s'):.0f} reward {mean('reward'):.3f} grad_norm {mean('grad_norm'):.3f} "
          f"mismatch {mean('logprob_mismatch'):.4f} | peak GPU {max(r.get('gpu_peak_gib', 0) for r in rows):.2f} GiB"
          + (f" | replica restarts {rows[-1].get('replica_restarts', 0):.0f}" if name == "replicas" else "")
          + (f"\n  {status.strip()}" if status else ""), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--variants", default="single,fsdp,replicas")
    ap.add_argument("--skip-rollout-bench", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs CUDA (use bench/rollout_replicas.py and the tests for the CPU paths)")
    gpus = torch.cuda.device_count()
    print(f"torch {torch.__version__}; {gpus} x {torch.cuda.get_device_name(0)}", flush=True)
    tmp = Path(tempfile.mkdtemp())
    base = grpo_setup(tmp, "cuda", args.hidden, args.layers, args.steps)
    if not args.skip_rollout_bench:
        subprocess.run([sys.executable, str(HERE / "rollout_replicas.py"), "--model", base["model"]["path"],
                        "--device", "cuda", "--replica-gpus", str(round(1 / 2.5, 2)), "--requests", "128",
                        "--prompt", "512", "--new-tokens", "128"], check=False)
    for name in args.variants.split(","):
        run_variant(name, base, tmp, gpus)


if __name__ == "__main__":
    main()
