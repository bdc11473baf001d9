"""Rollout records: one episode as a JSON line, written by training and eval, read by sft, rft and view.

A record is ``Trajectory.to_dict()`` (so :meth:`memrl.types.Trajectory.from_dict` reads it back)
plus, for people and viewers:

* ``format``, ``step``, ``policy_version`` (the update count of the weights that sampled it), ``pick``;
* per conversation: ``text.prompt`` / ``text.response`` (decoded, special tokens shown), the
  ``advantage`` its generated tokens were trained with, and ``trainer_logprobs`` aligned with
  ``token_ids`` (0.0 on prompt tokens) where the trainer computed them, beside the engine's
  sampling ``logprobs``.

Training picks which episodes to keep (:mod:`memrl.train.rollouts`) and eval names its own
(:mod:`memrl.eval.records`); both build the record here, and every reader reads it here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrl.io.errors import DataError
from memrl.io.record_check import record_problem
from memrl.io.text_files import utf8_lines
from memrl.types import Trajectory

ROLLOUT_FORMAT = 1


def rollout_record(traj: Trajectory, tokenizer: Any, *, step: int, version: int, pick: str,
                   advantages: Sequence[float | None] | None = None,
                   trainer_logprobs: Sequence[list[float] | None] | None = None) -> dict[str, Any]:
    """One episode as a rollout record (see the module docstring)."""
    record = traj.to_dict()
    record.update(format=ROLLOUT_FORMAT, step=step, policy_version=version, pick=pick)
    for k, (conv, out) in enumerate(zip(traj.conversations, record["conversations"])):
        split = conv.prompt_length
        if tokenizer is not None:  # none for an eval over a chat API, whose conversations hold no tokens
            out["text"] = {"prompt": tokenizer.decode(conv.token_ids[:split], skip_special_tokens=False),
                           "response": tokenizer.decode(conv.token_ids[split:], skip_special_tokens=False)}
        if advantages is not None and advantages[k] is not None:
            out["advantage"] = advantages[k]
        if trainer_logprobs is not None and trainer_logprobs[k] is not None:
            out["trainer_logprobs"] = trainer_logprobs[k]
    return record


def read_trajectories(path: str | Path, vocab_size: int | None = None) -> list[Trajectory]:
    """JSONL of ``Trajectory.to_dict()`` records (rollout records too), or a folder of such files.

    A folder is a run's ``rollouts/`` (or the run itself), read in name order. A record with a
    token id that is negative, not an integer or too large (``>= vocab_size`` when given) fails
    with ``file:line:field`` (see :mod:`memrl.io.record_check`).
    """
    path = Path(path)
    if path.is_dir():
        folder = path / "rollouts" if (path / "rollouts").is_dir() else path
        files = sorted(folder.glob("*.jsonl"))
        if not files:
            raise FileNotFoundError(f"{path}: no *.jsonl rollout files (a run writes them to RUN/rollouts/)")
        return [t for f in files for t in read_trajectories(f, vocab_size)]
    out = []
    for row, line in utf8_lines(path):
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise DataError(path, row, None, f"not JSON: {exc}") from None
        bad = record_problem(record, vocab_size)
        if bad is not None:
            raise DataError(path, row, bad[0], bad[1])
        try:
            out.append(Trajectory.from_dict(record))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise DataError(path, row, None, f"not a trajectory record: {exc}") from None
    return out
