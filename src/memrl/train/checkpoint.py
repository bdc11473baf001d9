"""Atomic, pickle-free checkpoints: weights (or adapter), optimizer, scheduler, RNG states, data position, step.

Layout of ``checkpoints/step_NNNNNN/``::

    model/               save_pretrained, safetensors
    reference/           the reference model, when it moves (algorithm.ref_sync_every) or has moved
    trainer.safetensors  optimizer state tensors and the torch/CUDA RNG states
    trainer.json         optimizer param groups, scheduler, Python/NumPy RNG states
    state.json           step, data position, streak counters
    manifest.json        size and sha256 of every file above, written last

Nothing is unpickled on resume: a checkpoint folder is input that may come from
elsewhere, and ``torch.load`` of a pickle can run arbitrary code. A folder is
built under a temporary name and renamed when complete, so ``latest()`` never
returns a half-written one; the manifest also catches damage done afterwards,
and ``select`` falls back to the newest intact checkpoint.
"""

from __future__ import annotations

import errno
import json
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from memrl.io.atomic import atomic_dir
from memrl.train.manifest import problem, write_manifest

_STEP_DIR = re.compile(r"^step_(\d+)$")
_DAMAGED_DIR = re.compile(r"^step_(\d+)\.damaged\d*$")
TENSORS, META, STATE = "trainer.safetensors", "trainer.json", "state.json"
REFERENCE = "reference"  # the moving reference model's folder (algorithm.ref_sync_every)
REQUIRED = (TENSORS, META, STATE, "model/")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from (damaged, or in a format that is not loaded)."""


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def latest(run_dir: Path) -> tuple[int, Path] | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def verify(ckpt: Path) -> str | None:
    """Why ``ckpt`` cannot be used, or None when its manifest vouches for every file."""
    return problem(ckpt, REQUIRED)


def select(run_dir: Path, warn: Callable[[str], None]) -> tuple[int, Path] | None:
    """The newest intact checkpoint; damaged newer ones are renamed aside (``*.damaged``) with a warning.

    None when there is no checkpoint at all (a fresh run); CheckpointError when
    there are some and none is intact, since silently starting over would
    overwrite the run's history.
    """
    bad: list[tuple[Path, str]] = []
    for step, path in reversed(checkpoints(run_dir)):
        why = verify(path)
        if why is None:
            for old, reason in bad:
                aside = _set_aside(old)
                warn(f"checkpoint {old} is damaged ({reason}); resuming from {path.name} instead "
                     f"(the damaged one is kept as {aside.name})")
            return step, path
        bad.append((path, why))
    if bad:
        listed = "; ".join(f"{p} ({why})" for p, why in bad)
        raise CheckpointError(f"no intact checkpoint to resume from: {listed}. Move them out of "
                              f"{run_dir / 'checkpoints'} to start the run over, or use another trainer.output_dir")
    return None


def finished(run_dir: Path, total_steps: int) -> int | None:
    """The step of an intact checkpoint with ``total_steps`` counted steps done (nothing left to do), else None.

    Steps that trained nothing (``idle_steps`` in state.json) do not count toward ``total_steps``.
    """
    newest = latest(run_dir)
    if newest is None or newest[0] < total_steps or verify(newest[1]) is not None:
        return None
    try:
        idle = int(json.loads((newest[1] / STATE).read_text()).get("idle_steps", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return None  # resuming reports what is wrong with it
    return newest[0] if newest[0] - idle >= total_steps else None


def _set_aside(path: Path) -> Path:
    """Rename a damaged checkpoint so it is neither resumed from nor in the way of a new save of that step."""
    aside = path.with_name(path.name + ".damaged")
    k = 1
    while aside.exists():
        k += 1
        aside = path.with_name(f"{path.name}.damaged{k}")
    path.rename(aside)
    return aside


# -- RNG states as tensors + JSON ---------------------------------------------------------------
def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, JSON-able values) of the Python, NumPy, torch and CUDA generators."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    tensors = {"rng.torch": torch.get_rng_state()}
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    tensors.update({f"rng.cuda.{i}": s for i, s in enumerate(cuda)})
    return tensors, {"python": [version, list(internal), gauss],
                     "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)], "cuda": len(cuda)}


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["rng.torch"])
    if meta.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[f"rng.cuda.{i}"] for i in range(meta["cuda"])])


# -- optimizer state as tensors + JSON ----------------------------------------------------------
def _split_optimizer(optim: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Name-keyed optimizer state -> (tensors for safetensors, JSON with references to them)."""
    tensors: dict[str, torch.Tensor] = {}
    state: dict[str, dict[str, Any]] = {}
    for name, entry in optim["state"].items():
        state[str(name)] = {}
        for key, val in entry.items():
            if torch.is_tensor(val):
                ref = f"optimizer.{len(tensors)}"
                tensors[ref] = val.detach().cpu().contiguous()
                state[str(name)][key] = {"tensor": ref}
            else:
                state[str(name)][key] = {"value": val}
    return tensors, {"state": state, "param_groups": optim["param_groups"]}


def _join_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state = {name: {key: tensors[v["tensor"]] if "tensor" in v else v["value"] for key, v in entry.items()}
             for name, entry in meta["state"].items()}
    # JSON turned tuples (AdamW's betas) into lists; give the optimizer back what it saved
    groups = [{k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in g.items()}
              for g in meta["param_groups"]]
    return {"state": state, "param_groups": groups}


def _json(obj: Any, what: str) -> str:
    try:
        return json.dumps(obj, indent=1)
    except TypeError as err:
        raise TypeError(f"cannot checkpoint the {what}: {err}") from None


def save(run_dir: Path, step: int, model: Any, optimizer: Any, scheduler: Any, state: dict[str, Any],
         keep: int = 2, *, write: bool = True, reference: Any = None) -> Path:
    """Checkpoint ``step``. Under FSDP every rank calls this (the gather is collective); only ``write`` ranks write.

    Optimizer state is stored unsharded and keyed by parameter name, so a run
    can resume with another ``cluster.strategy`` or number of ranks. ``reference``: a reference model that
    moves during the run (``algorithm.ref_sync_every``), saved beside the policy.
    """
    from safetensors.torch import save_file

    from memrl.dist.fsdp import full_optimizer_state, full_state_dict

    dest = run_dir / "checkpoints" / f"step_{step:06d}"
    weights = full_state_dict(model)
    ref_weights = full_state_dict(reference) if reference is not None else None
    optim = full_optimizer_state(model, optimizer)
    if not write:
        return dest
    opt_tensors, opt_meta = _split_optimizer(optim)
    rng_tensors, rng_meta = rng_state()
    meta = _json({"optimizer": opt_meta, "scheduler": scheduler.state_dict(), "rng": rng_meta}, "trainer state")
    if dest.exists():  # resuming sets newer damaged ones aside: only another writer can have put it there
        raise CheckpointError(f"checkpoint {dest} already exists: is another run writing to {run_dir}? Refusing "
                              "to replace it; move it away or use another trainer.output_dir")
    try:
        with atomic_dir(dest) as tmp:
            model.save_pretrained(tmp / "model", state_dict=weights, safe_serialization=True)
            if ref_weights is not None:
                model.save_pretrained(tmp / REFERENCE, state_dict=ref_weights, safe_serialization=True)
            save_file({**opt_tensors, **rng_tensors}, str(tmp / TENSORS))
            (tmp / META).write_text(meta)
            (tmp / STATE).write_text(json.dumps({"step": step, **state}, indent=2))
            write_manifest(tmp)
    except Exception as err:  # noqa: BLE001 - only a full disk is turned into one line; the rest propagates
        if not _disk_full(err):
            raise
        last = latest(run_dir)
        kept = f"the last complete checkpoint is {last[1].name}" if last else "no checkpoint was complete yet"
        raise CheckpointError(f"cannot write checkpoint {dest.name} in {dest.parent}: no space left on device. "
                              f"Nothing was lost: {kept}; free some space and re-run the same command to "
                              "resume") from None
    prune(run_dir, keep)
    return dest


def _disk_full(err: BaseException) -> bool:
    """ENOSPC/EDQUOT from Python, or the same reported as text by safetensors' Rust writer."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    return "No space left on device" in text or "Disk quota exceeded" in text or "StorageFull" in text


def prune(run_dir: Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints; damaged folders go with the steps they belong to
    (those older than the oldest checkpoint kept)."""
    found = checkpoints(run_dir)
    for _, old in found[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    oldest_kept = found[-keep:][0][0] if found else 0
    root = run_dir / "checkpoints"
    for p in root.iterdir() if root.is_dir() else ():
        m = _DAMAGED_DIR.match(p.name)
        if m and int(m.group(1)) < oldest_kept and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)


def load_weights(model: Any, ckpt: Path, folder_name: str = "model") -> None:
    """Load saved weights (full model or LoRA adapter) into ``model`` in place (``folder_name``: ``model``, or
    :data:`REFERENCE` for a moving reference)."""
    from safetensors.torch import load_file

    from memrl.train.policy import is_peft

    folder = ckpt / folder_name
    if is_peft(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, _read(folder / "adapter_model.safetensors", load_file))
        return
    state = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(_read(f, load_file))
    missing, unexpected = model.load_state_dict(state, strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied embeddings are not saved
    if real_missing or unexpected:
        raise CheckpointError(f"checkpoint {ckpt} does not match the model: missing {real_missing[:3]}, "
                              f"unexpected {unexpected[:3]}")


def _read(path: Path, loader: Callable[[str], Any]) -> Any:
    """``loader(path)``, with any failure reported as one line naming the file."""
    try:
        return loader(str(path))
    except Exception as err:  # noqa: BLE001 - every reader failure means the same thing here
        raise CheckpointError(f"cannot read checkpoint file {path}: {type(err).__name__}: {err}") from None


def load_trainer_state(ckpt: Path, model: Any, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Optimizer, scheduler and RNG state (after ``load_weights`` and any sharding); returns state.json."""
    from safetensors.torch import load_file

    from memrl.dist.fsdp import load_optimizer_state

    tensors = _read(ckpt / TENSORS, load_file)
    meta = _read(ckpt / META, lambda p: json.loads(Path(p).read_text()))
    state = _read(ckpt / STATE, lambda p: json.loads(Path(p).read_text()))
    load_optimizer_state(model, optimizer, _join_optimizer(tensors, meta["optimizer"]))
    scheduler.load_state_dict(meta["scheduler"])
    set_rng_state(tensors, meta["rng"])
    return state
