"""Checkpoints on disk, and the ``tinker://`` paths that name them.

``tinker://<model_id>/weights/<name>`` (``save_state``: adapter + optimizer) and
``tinker://<model_id>/sampler_weights/<name>`` (``save_weights_for_sampler``: adapter only) resolve to
``<state_dir>/runs/<model_id>/{weights,sampler_weights}/<name>/`` (``:`` in a model id becomes ``_``).
A checkpoint folder holds ``adapter.safetensors`` (LoRA tensors under peft's names without the adapter
name), ``optimizer.safetensors`` (AdamW's ``step``/``exp_avg``/``exp_avg_sq`` per tensor, for
``weights``) and ``meta.json`` (base model, LoRA shape, time). No pickle anywhere: a checkpoint is
data, never code. Each folder is built complete in a temp sibling and renamed into place (an overwritten one
steps aside only then, and comes back if the rename fails or, at the next start, if the server died between
the two renames: :func:`recover`), so a crash or Ctrl-C mid-save leaves the old checkpoint or the new one,
never half of one and never neither; a restarted server on
the same ``--state-dir`` finds every checkpoint by its path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from memrl.io.atomic import atomic_dir, atomic_write

KINDS = {"weights": "training", "sampler_weights": "sampler"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,200}$")


class CheckpointError(ValueError):
    """A path that names no checkpoint here, or a name that cannot be one; the message says which."""


def check_name(name: str, field_name: str = "path") -> str:
    if not _NAME.match(name or ""):
        raise CheckpointError(f"{field_name}: checkpoint names are 1-128 of A-Z a-z 0-9 . _ - (got {name!r})")
    return name


def run_dir(state_dir: Path, model_id: str) -> Path:
    if not _MODEL_ID.match(model_id):
        raise CheckpointError(f"not a model id of this server: {model_id!r}")
    return state_dir / "runs" / model_id.replace(":", "_")


def tinker_path(model_id: str, kind: str, name: str) -> str:
    return f"tinker://{model_id}/{kind}/{name}"


def parse_path(path: str) -> tuple[str, str, str]:
    """``tinker://<model_id>/<kind>/<name>`` -> ``(model_id, kind, name)``, or a one-line error."""
    if not path.startswith("tinker://"):
        raise CheckpointError(f"path: expected tinker://<model_id>/weights/<name>, got {path!r}")
    parts = path[len("tinker://"):].split("/")
    if len(parts) != 3 or parts[1] not in KINDS:
        raise CheckpointError(f"path: expected tinker://<model_id>/(weights|sampler_weights)/<name>, got {path!r}")
    return parts[0], parts[1], check_name(parts[2])


def folder_of(state_dir: Path, path: str) -> tuple[str, str, Path]:
    """``(model_id, kind, folder)`` of an existing checkpoint, or ``CheckpointError`` saying it is not there."""
    model_id, kind, name = parse_path(path)
    folder = run_dir(state_dir, model_id) / kind / name
    if not (folder / "meta.json").is_file():
        raise CheckpointError(f"no checkpoint at {path} (looked in {folder})")
    if _expired(read_json(folder / "meta.json"), time.time()):
        raise CheckpointError(f"the checkpoint at {path} has expired (its ttl_seconds ran out)")
    return model_id, kind, folder


def _expired(meta: dict[str, Any] | None, now: float) -> bool:
    expires = (meta or {}).get("expires_at")
    return isinstance(expires, (int, float)) and expires <= now


def expire(state_dir: Path) -> list[str]:
    """Delete the checkpoints whose ``ttl_seconds`` ran out (run at start and after each save); their paths.

    A TTL is the client's own request (the cookbook gives its rolling checkpoints two hours and relies on it
    to free the disk); a checkpoint saved without one never expires."""
    now, gone = time.time(), []
    for base in _kind_folders(state_dir):
        for folder in sorted(base.iterdir()):
            if folder.is_dir() and not folder.name.startswith(".") and _expired(read_json(folder / "meta.json"), now):
                shutil.rmtree(folder, ignore_errors=True)
                gone.append(str(folder))
    return gone


def set_ttl(state_dir: Path, model_id: str, checkpoint_id: str, ttl_seconds: int | None) -> None:
    """``set_checkpoint_ttl``: expire ``ttl_seconds`` from now, or never (None)."""
    folder = _checkpoint_folder(state_dir, model_id, checkpoint_id)
    meta = read_json(folder / "meta.json") or {}
    meta["expires_at"] = None if ttl_seconds is None else time.time() + check_ttl(ttl_seconds)
    write_json(folder / "meta.json", meta)


def set_public(state_dir: Path, model_id: str, checkpoint_id: str, public: bool) -> bool:
    """``publish`` / ``unpublish``: the flag the checkpoint listing shows; False if it was set so already. One
    local folder, readable by whoever holds the key: the flag is a record, not a grant."""
    folder = _checkpoint_folder(state_dir, model_id, checkpoint_id)
    meta = read_json(folder / "meta.json") or {}
    if bool(meta.get("public")) == public:
        return False
    meta["public"] = public
    write_json(folder / "meta.json", meta)
    return True


def check_ttl(ttl_seconds: int) -> int:
    """The request schemas bound a TTL as the SDK documents it (1 hour to 10 years); this is for direct callers."""
    if ttl_seconds < 1:
        raise CheckpointError(f"ttl_seconds: must be at least 1 (or null: never expires), got {ttl_seconds}")
    return ttl_seconds


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as fh:
        json.dump(data, fh, indent=1, sort_keys=True)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_run(state_dir: Path, model_id: str, info: dict[str, Any]) -> None:
    write_json(run_dir(state_dir, model_id) / "run.json", info)


def save(state_dir: Path, model_id: str, kind: str, name: str, adapter: dict[str, torch.Tensor],
         optimizer: dict[str, torch.Tensor] | None, meta: dict[str, Any], overwrite: bool) -> str:
    """Write one checkpoint folder atomically and return its ``tinker://`` path."""
    from safetensors.torch import save_file

    check_name(name)
    folder = run_dir(state_dir, model_id) / kind / name
    path = tinker_path(model_id, kind, name)
    if folder.exists() and not overwrite:
        raise CheckpointError(f"a checkpoint named {name!r} exists already at {path} (pass overwrite=True)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    staged, trash = folder.with_name(f".{name}.new-{stamp}"), folder.with_name(f".{name}.old-{stamp}")
    with atomic_dir(staged) as tmp:  # the new checkpoint, complete, beside the old one
        save_file({k: v.detach().cpu().contiguous() for k, v in adapter.items()}, str(tmp / "adapter.safetensors"))
        if optimizer is not None:
            save_file({k: v.detach().cpu().contiguous() for k, v in optimizer.items()},
                      str(tmp / "optimizer.safetensors"))
        now, ttl = time.time(), meta.pop("ttl_seconds", None)
        write_json(tmp / "meta.json", {**meta, "tinker_path": path, "time": now, "kind": kind,
                                       "expires_at": None if ttl is None else now + check_ttl(ttl)})
    try:
        if folder.exists():  # overwrite: the old one steps aside only now, for the rename below
            os.replace(folder, trash)
        os.replace(staged, folder)
    except BaseException:
        if trash.exists() and not folder.exists():
            os.replace(trash, folder)  # the old checkpoint stays where it was
        shutil.rmtree(staged, ignore_errors=True)
        raise
    shutil.rmtree(trash, ignore_errors=True)
    return path


def recover(state_dir: Path) -> list[str]:
    """Finish what a server killed inside ``save`` left (run at start, before any request): an old checkpoint
    set aside whose new one never landed goes back under its name; a set-aside one whose replacement landed,
    and a staged one that never did, are removed. Returns what was put back."""
    restored = []
    for base in _kind_folders(state_dir):
        for entry in sorted(base.glob(".*.old-*"), key=lambda p: p.stat().st_mtime, reverse=True):
            name = entry.name[1:].rsplit(".old-", 1)[0]
            if not (base / name).exists():
                os.replace(entry, base / name)
                restored.append(str(base / name))
            else:
                shutil.rmtree(entry, ignore_errors=True)
        for entry in base.glob(".*.new-*"):
            shutil.rmtree(entry, ignore_errors=True)
    return restored


def _kind_folders(state_dir: Path) -> list[Path]:
    root = state_dir / "runs"
    runs = [d for d in root.iterdir() if d.is_dir()] if root.is_dir() else []
    return [d / kind for d in runs for kind in KINDS if (d / kind).is_dir()]


def load(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    """``(meta, adapter tensors, optimizer tensors or None)`` of a checkpoint folder; a file that does not read
    (cut short by a full disk, edited, deleted) is a :class:`CheckpointError` naming it: the client's 400, not
    a server error its SDK retries eleven times."""
    from safetensors.torch import load_file

    meta = read_json(folder / "meta.json") or {}
    opt_file = folder / "optimizer.safetensors"
    try:
        adapter = load_file(str(folder / "adapter.safetensors"))
        return meta, adapter, (load_file(str(opt_file)) if opt_file.is_file() else None)
    except Exception as exc:  # safetensors raises its own error type, or OSError
        raise CheckpointError(f"checkpoint {folder.name} is damaged ({type(exc).__name__}: {exc}); save it "
                              "again or load another") from None


def _checkpoint_info(folder: Path, kind: str, now: float) -> tuple[float, dict[str, Any]] | None:
    """(exact save time, the REST ``Checkpoint``) of a finished, unexpired checkpoint folder; else None."""
    meta = read_json(folder / "meta.json")
    if meta is None or _expired(meta, now):
        return None
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    expires = meta.get("expires_at")
    return float(meta.get("time", 0.0)), {
        "checkpoint_id": f"{kind}/{folder.name}", "checkpoint_type": KINDS[kind],
        "time": iso_time(meta.get("time", 0.0)), "tinker_path": meta.get("tinker_path", ""), "size_bytes": size,
        "public": bool(meta.get("public")), "user_metadata": meta.get("user_metadata") or None,
        "expires_at": iso_time(expires) if isinstance(expires, (int, float)) else None}


def list_checkpoints(state_dir: Path, model_id: str) -> list[dict[str, Any]]:
    """Every finished checkpoint of one training run, oldest first (the REST ``Checkpoint`` shape).

    Ordered by the exact save time: two saves within one second share their ISO ``time``."""
    out, now = [], time.time()
    for kind in KINDS:
        base = run_dir(state_dir, model_id) / kind
        for folder in sorted(base.iterdir()) if base.is_dir() else []:
            info = _checkpoint_info(folder, kind, now) if folder.is_dir() and not folder.name.startswith(".") else None
            if info is not None:
                out.append(info)
    return [c for _, c in sorted(out, key=lambda c: c[0])]


def list_runs(state_dir: Path) -> list[dict[str, Any]]:
    """The ``run.json`` of every training run ever created under ``state_dir``."""
    root = state_dir / "runs"
    runs = [read_json(d / "run.json") for d in sorted(root.iterdir())] if root.is_dir() else []
    return [r for r in runs if _run_record(r)]


def _run_record(record: Any) -> bool:
    """Whether a ``run.json`` is one this server wrote (an object naming a valid model id); another file in the
    state folder must not break every client's listing."""
    return isinstance(record, dict) and isinstance(record.get("training_run_id"), str) \
        and bool(_MODEL_ID.match(record["training_run_id"])) and isinstance(record.get("created", 0.0), (int, float))


def _checkpoint_folder(state_dir: Path, model_id: str, checkpoint_id: str) -> Path:
    kind, _, name = checkpoint_id.partition("/")
    if kind not in KINDS:
        raise CheckpointError("checkpoint_id: expected weights/<name> or sampler_weights/<name>, "
                              f"got {checkpoint_id!r}")
    folder = run_dir(state_dir, model_id) / kind / check_name(name, "checkpoint_id")
    if not folder.is_dir():
        raise CheckpointError(f"no checkpoint {checkpoint_id!r} in run {model_id!r}")
    return folder


def delete(state_dir: Path, model_id: str, checkpoint_id: str) -> None:
    shutil.rmtree(_checkpoint_folder(state_dir, model_id, checkpoint_id))


def iso_time(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(t)))
