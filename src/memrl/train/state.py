"""A run's state across restarts: which checkpoint to resume, and what a checkpoint holds besides weights.

Weights, optimizer and scheduler live in the checkpoint files (``memrl.train.checkpoint``);
``state.json`` adds the step, the data order's position and the streak counters, so a
resumed run continues exactly where the saved one stood.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from memrl.config import ConfigError, MemRLConfig
from memrl.train import checkpoint
from memrl.train.preflight import check_run_config, is_allowed


@dataclass
class RunState:
    """The counters a checkpoint restores (saved with its optimizer and scheduler)."""

    step: int = 0
    data_position: int = 0
    nan_streak: int = 0
    idle_streak: int = 0
    # steps that trained nothing (every episode failed, ...): they do not count toward trainer.total_steps,
    # as verl (DAPO) and AReaL count only steps that update the policy
    idle_steps: int = 0
    # asynchronous training: samples drawn from the data order but not trained on yet (regenerated on resume)
    pending: list[int] = field(default_factory=list)
    # ... and the producer's counters and unfinished groups, so a resumed one seeds and budgets as before
    producer: dict[str, Any] | None = None
    # what the run trains on (samples_fingerprint): a resume on other samples would silently change the data order
    samples: dict[str, Any] | None = None
    # adaptive entropy control's coefficient and last entropy (algorithm.adaptive_entropy)
    entropy_control: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["step"]  # checkpoint.save writes the step itself
        if not self.idle_steps:
            del out["idle_steps"]
        if not self.pending:
            del out["pending"]
        if self.producer is None:
            del out["producer"]
        if self.samples is None:
            del out["samples"]
        if self.entropy_control is None:
            del out["entropy_control"]
        return out

    @classmethod
    def from_json(cls, state: dict[str, Any]) -> RunState:
        """The counters of a checkpoint's state, each checked: the file is on disk, and a hand edit or another
        tool's write must fail here naming the field, not steps later in arithmetic."""
        if not isinstance(state, dict):
            raise ValueError(f"expected an object, got {type(state).__name__}")
        for name in ("step", "data_position", "nan_streak", "idle_streak", "idle_steps"):
            value = state.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} is {value!r}, expected a whole number >= 0")
        pending = state.get("pending", [])
        if not isinstance(pending, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in pending):
            raise ValueError(f"pending is {pending!r}, expected a list of sample indices")
        return cls(step=state["step"], data_position=state["data_position"],
                   nan_streak=state.get("nan_streak", 0), idle_streak=state.get("idle_streak", 0),
                   idle_steps=state.get("idle_steps", 0),
                   pending=list(state.get("pending", [])), samples=state.get("samples"),
                   producer=state.get("producer"), entropy_control=state.get("entropy_control"))


def samples_fingerprint(samples: Sequence[Any]) -> dict[str, Any]:
    """How many samples, and a SHA-256 of them when they are data: records, dataclasses (the long-context
    workflows' samples) and pydantic models by their fields; None for other objects, whose text form need not
    be stable across processes (a streamed sample, which would have to read its whole document)."""
    digest = hashlib.sha256()
    try:
        for sample in samples:
            digest.update(json.dumps(sample, sort_keys=True, default=_fields).encode())
            digest.update(b"\n")
    except (TypeError, ValueError):
        return {"count": len(samples), "sha256": None}
    return {"count": len(samples), "sha256": digest.hexdigest()}


def _fields(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if callable(getattr(obj, "model_dump", None)):
        return obj.model_dump(mode="json")
    raise TypeError(type(obj).__name__)


def check_same_samples(cfg: MemRLConfig, saved: dict[str, Any] | None, now: dict[str, Any], run_dir: Path) -> None:
    """A resumed run must train on the samples it started with (the data order is a permutation of them),
    unless ``trainer.allow_changes`` names ``data.train_file``."""
    if saved is None or saved == now or is_allowed("data.train_file", cfg.trainer.allow_changes):
        return
    if saved["count"] == now["count"] and (saved.get("sha256") is None or now.get("sha256") is None):
        return  # content unknown on one side (a checkpoint from before samples of its kind had a digest)
    what = (f"{saved['count']} samples then, {now['count']} now" if saved["count"] != now["count"]
            else f"the same {now['count']} samples in number, different in content")
    raise ConfigError(f"{run_dir} was trained on other samples ({what}); resume with the ones it started with, "
                      "use another trainer.output_dir, or pass trainer.allow_changes=[data.train_file]")


def choose_checkpoint(cfg: MemRLConfig, run_dir: Path, warn: Callable[[str], None]) -> tuple[int, Path] | None:
    """Rank 0, before any model loads: check the run's config against the saved one (a damaged or
    incompatible run fails in seconds) and pick the newest intact checkpoint (None: a fresh run)."""
    check_run_config(cfg, run_dir, notice=warn)
    return checkpoint.select(run_dir, warn=warn)


def restore(cfg: MemRLConfig, ckpt: Path, policy: Any, optimizer: Any, scheduler: Any) -> RunState:
    """Optimizer, scheduler and RNG state (after the weights were loaded and any sharding) and the counters.

    The saved optimizer and scheduler carry the learning rate and weight decay they were built
    with; the current ``trainer.lr``/``trainer.weight_decay`` replace them (equal unless the run
    resumes with ``trainer.allow_changes``), as verl and TRL take them from the config on resume.
    """
    saved = checkpoint.load_trainer_state(ckpt, policy, optimizer, scheduler)
    try:
        restored = RunState.from_json(saved)
    except (KeyError, ValueError) as exc:
        why = f"{exc.args[0]} is missing" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{ckpt}: its trainer state does not read ({why}); restore it, or move this checkpoint "
                         "aside to resume from an earlier one") from None
    apply_hyperparameters(cfg, optimizer, scheduler)
    return restored


def apply_hyperparameters(cfg: MemRLConfig, optimizer: Any, scheduler: Any) -> None:
    """Set the configured base learning rate (at the schedule's current point) and weight decay."""
    lr, decay = cfg.trainer.lr, cfg.trainer.weight_decay
    scheduler.base_lrs = [lr for _ in optimizer.param_groups]
    factors = [f(scheduler.last_epoch) for f in scheduler.lr_lambdas]
    for group, factor in zip(optimizer.param_groups, factors):
        group["initial_lr"], group["weight_decay"], group["lr"] = lr, decay, lr * factor
    scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]


def save(cfg: MemRLConfig, run_dir: Path, state: RunState, policy: Any, optimizer: Any, scheduler: Any, *,
         write: bool, reference: Any = None) -> Path:
    """Checkpoint ``state.step``; rank 0 writes; under FSDP every rank calls this (the gather is collective).
    ``reference``: the :class:`memrl.train.policy.Reference`, saved when it has moved from the initial weights
    (``algorithm.ref_sync_every``, now or in the run's past)."""
    moved = reference is not None and reference.frozen is not None and \
        (reference.moved or cfg.algorithm.ref_sync_every is not None)
    return checkpoint.save(run_dir, state.step, policy, optimizer, scheduler, state.to_json(),
                           keep=cfg.trainer.keep_checkpoints, write=write,
                           reference=reference.frozen if moved else None)


def load_weights(ckpt: Path, policy: Any, reference: Any) -> None:
    """A checkpoint's policy weights, and its moved reference's where it has one and the run keeps a reference
    copy (a run saved before ``ref_sync_every`` was set has none: the reference is the initial weights; one
    resumed without it keeps the moved reference as its fixed one, rather than jumping back to step 0's)."""
    checkpoint.load_weights(policy, ckpt)
    if reference is not None and reference.frozen is not None and (ckpt / checkpoint.REFERENCE).is_dir():
        checkpoint.load_weights(reference.frozen, ckpt, checkpoint.REFERENCE)
        reference.moved = True
