"""Atomic checkpoints: weights (or adapter), optimizer, scheduler, RNG states, data position, step.

A checkpoint folder is written under a temporary name and renamed when
complete, so ``latest()`` never returns a half-written one. Older
checkpoints beyond ``keep`` are deleted after a new one lands.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from memrl.data.atomic import atomic_dir

_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def latest(run_dir: Path) -> tuple[int, Path] | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run_dir: Path, step: int, model: Any, optimizer: Any, scheduler: Any, state: dict[str, Any],
         keep: int = 2, *, write: bool = True) -> Path:
    """Checkpoint ``step``. Under FSDP every rank calls this (the gather is collective); only ``write`` ranks write.

    Optimizer state is stored unsharded and keyed by parameter name, so a run
    can resume with another ``cluster.strategy`` or number of ranks.
    """
    from memrl.dist.fsdp import full_optimizer_state, full_state_dict

    dest = run_dir / "checkpoints" / f"step_{step:06d}"
    weights = full_state_dict(model)
    optim = full_optimizer_state(model, optimizer)
    if not write:
        return dest
    with atomic_dir(dest) as tmp:
        model.save_pretrained(tmp / "model", state_dict=weights, safe_serialization=True)
        torch.save({"optimizer": optim, "scheduler": scheduler.state_dict(), "rng": rng_state()},
                   tmp / "trainer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=2))
    for _, old in checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def load_weights(model: Any, ckpt: Path) -> None:
    """Load saved weights (full model or LoRA adapter) into ``model`` in place."""
    from memrl.train.policy import is_peft

    folder = ckpt / "model"
    if is_peft(model):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        set_peft_model_state_dict(model, load_file(str(folder / "adapter_model.safetensors")))
        return
    from safetensors.torch import load_file

    state = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(f)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied embeddings are not saved
    if real_missing or unexpected:
        raise RuntimeError(f"checkpoint {ckpt} does not match the model: missing {real_missing[:3]}, "
                           f"unexpected {unexpected[:3]}")


def load_trainer_state(ckpt: Path, model: Any, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Optimizer, scheduler and RNG state (after ``load_weights`` and any sharding); returns state.json."""
    from memrl.dist.fsdp import load_optimizer_state

    blob = torch.load(ckpt / "trainer.pt", weights_only=False)
    load_optimizer_state(model, optimizer, blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    set_rng_state(blob["rng"])
    return json.loads((ckpt / "state.json").read_text())
