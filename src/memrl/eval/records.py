"""Eval episodes as rollout records: the structure training writes, so one reader serves both.

``memrl eval`` keeps, next to its summaries (``episodes/``) and human-readable ``transcripts/``,
each finished episode as a rollout record in ``OUT/rollouts/<episode>.jsonl`` (the episode's path
under ``episodes/``, one JSON line). A record is what :func:`memrl.io.records.rollout_record`
builds (``Trajectory.to_dict()``: token ids, loss mask and sampling log-probs per conversation,
reward, metrics, info; plus decoded ``text`` per conversation), with no advantage or trainer
log-probs (nothing was trained), ``step`` / ``policy_version`` null, ``pick`` = ``"eval"`` and an
``eval`` object saying which episode it is (``docs`` and ``repeat``, or ``task_id`` and ``trial``).

:func:`read_rollouts` reads a training run, a run's ``rollouts/`` folder, an eval folder or one
``.jsonl`` file back into :class:`~memrl.types.Trajectory` objects, for ``memrl sft`` / ``memrl rft``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from memrl.io.atomic import atomic_write
from memrl.io.records import read_trajectories, rollout_record
from memrl.types import Trajectory

ROLLOUTS = "rollouts"


def eval_record(traj: Trajectory, tokenizer: Any, where: dict[str, Any]) -> dict[str, Any]:
    """One eval episode as a rollout record; ``where`` names it (e.g. ``{"docs": 50, "repeat": 0}``)."""
    record = rollout_record(traj, tokenizer, step=0, version=0, pick="eval")
    record.update(step=None, policy_version=None, eval=dict(where))
    return record


def save_eval_rollout(out: Path, name: str, traj: Trajectory, tokenizer: Any, where: dict[str, Any]) -> Path:
    """Write the record of episode ``name`` (its path under ``episodes/`` without ``.json``)."""
    path = Path(out) / ROLLOUTS / f"{name}.jsonl"
    with atomic_write(path) as fh:
        fh.write(json.dumps(eval_record(traj, tokenizer, where), ensure_ascii=False, default=str) + "\n")
    return path


def task_folder(task_id: str) -> str:
    """A file-system-safe folder name for a task id (τ² telecom ids hold brackets, pipes and spaces).

    Tool-agent evals keep each task's episodes under ``episodes/<task_folder>/``, and the τ²
    results export reads them back from there.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("_")[:60] or "task"
    if safe == task_id:
        return safe
    return f"{safe}-{hashlib.sha1(task_id.encode()).hexdigest()[:8]}"


def _natural(path: Path) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.as_posix())]


def rollout_paths(path: str | Path) -> list[Path]:
    """The ``.jsonl`` rollout files under ``path``: a run or eval folder, a ``rollouts/`` folder, or a file."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such file or folder")
    folder = path / ROLLOUTS if (path / ROLLOUTS).is_dir() else path
    files = sorted(folder.rglob("*.jsonl"), key=lambda p: _natural(p.relative_to(folder)))
    if not files:
        raise FileNotFoundError(f"{path}: no *.jsonl rollout files (training writes RUN/rollouts/, "
                                "memrl eval writes OUT/rollouts/)")
    return files


def read_rollouts(path: str | Path) -> list[Trajectory]:
    """Every episode the rollout files under ``path`` hold (see :func:`rollout_paths`)."""
    return [t for file in rollout_paths(path) for t in read_trajectories(file)]


def read_record(out: Path, name: str) -> dict[str, Any] | None:
    """The rollout record of eval episode ``name``, or None (an eval from before memrl wrote them)."""
    path = Path(out) / ROLLOUTS / f"{name}.jsonl"
    if not path.is_file():
        return None
    line = path.read_text(encoding="utf-8").split("\n", 1)[0]
    try:
        return json.loads(line)
    except ValueError:
        return None


def finished_episode(path: Path) -> dict[str, Any] | None:
    """The episode file ``path`` as a record, or None when the episode is to run (again): no file, or a damaged
    one (cut short, not JSON), which is set aside as ``<name>.damaged`` with a notice naming it, not deleted."""
    import sys

    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict):
        return record
    aside = path.with_name(path.name + ".damaged")
    path.replace(aside)
    print(f"notice: {path} is damaged (not a JSON record); set aside as {aside.name}, its episode runs again",
          file=sys.stderr, flush=True)
    return None
