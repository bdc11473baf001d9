"""Per-rank training state (weights + gradients + AdamW moments) with whole replicas vs FSDP2 shards.

    python bench/fsdp_memory.py [--ranks 2] [--hidden 512] [--layers 8]

Spawns W gloo ranks on the CPU, builds a random Qwen2-style model, runs one
forward/backward/AdamW step, and prints the bytes each rank holds for weights,
gradients and optimizer state: the whole model (the DDP-style strategy) or its
shard (``memrl.dist.fsdp.shard_model``). Counts tensors, so it reads the same on
any machine; the GPU saving is the same fraction of these bytes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _bytes(tensors: list[torch.Tensor]) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors)


def rank_main(rank: int, world: int, port: int, model_dir: str, strategy: str, out: dict) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from memrl.dist.fsdp import shard_model
    from memrl.models.resolve import load_model

    model = load_model(model_dir, dtype="float32", device="cpu")
    if strategy == "fsdp":
        shard_model(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    ids = torch.randint(0, 500, (2, 64))
    model(input_ids=ids).logits.float().pow(2).mean().backward()
    opt.step()
    states = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
    out[(strategy, rank)] = (_bytes(params), _bytes([p.grad for p in params if p.grad is not None]), _bytes(states))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    from memrl_demo.needle import tokenizer_corpus
    from memrl.dist.ddp import free_port
    from memrl.models.tiny import build_tiny_model

    model_dir = Path(tempfile.mkdtemp()) / "model"
    build_tiny_model(model_dir, tokenizer_corpus(), vocab_size=600, hidden_size=args.hidden,
                     num_layers=args.layers, num_heads=args.hidden // 64, num_kv_heads=max(args.hidden // 256, 1),
                     intermediate_size=4 * args.hidden, max_position_embeddings=4096)
    with mp.Manager() as manager:
        out = manager.dict()
        for strategy in ("ddp", "fsdp"):
            mp.start_processes(rank_main, args=(args.ranks, free_port(), str(model_dir), strategy, out),
                               nprocs=args.ranks, start_method="spawn")
        mib = 2**20
        for strategy in ("ddp", "fsdp"):
            for r in range(args.ranks):
                w, g, o = out[(strategy, r)]
                print(f"{strategy:4s} rank {r}: weights {w / mib:7.1f} MiB  grads {g / mib:7.1f} MiB  "
                      f"AdamW {o / mib:7.1f} MiB  total {(w + g + o) / mib:7.1f} MiB")


if __name__ == "__main__":
    main()
