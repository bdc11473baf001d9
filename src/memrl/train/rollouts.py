"""Rollouts on disk: the episodes a step trained on, as records a person (or ``memrl sft``) can read.

Every ``trainer.rollouts_every`` steps the trainer writes ``RUN/rollouts/step_NNNNNN.jsonl`` with
``trainer.rollouts_per_step`` episodes of that step: the best, the worst, then random ones, each a
rollout record (:mod:`memrl.io.records`) with the advantage and trainer log-probs it was trained with.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrl.io.atomic import atomic_write
from memrl.io.records import rollout_record
from memrl.types import Trajectory


def pick_episodes(rewards: Sequence[float], n: int, seed: int) -> list[tuple[int, str]]:
    """(index, why) of up to ``n`` episodes: the best, the worst, then a seeded random sample of the rest."""
    if n <= 0 or not rewards:
        return []
    order = sorted(range(len(rewards)), key=lambda i: (rewards[i], i))
    picked: list[tuple[int, str]] = [(order[-1], "best")]
    if n > 1 and len(order) > 1:
        picked.append((order[0], "worst"))
    rest = [i for i in range(len(rewards)) if i not in {p for p, _ in picked}]
    random.Random(seed).shuffle(rest)
    picked += [(i, "random") for i in rest[: max(n - len(picked), 0)]]
    return picked


def row_views(rows: Sequence[Any], n_conversations: Sequence[int]) -> tuple[list[list[float | None]],
                                                                          list[list[list[float] | None]]]:
    """Per episode and conversation: the advantage and the trainer's log-probs (aligned to token ids).

    Rows exist only for conversations with generated tokens; ``row.old_logprobs[i]`` scores token
    ``i + 1``, so the aligned list starts with 0.0 for the first token and is 0.0 on prompt tokens.
    """
    adv: list[list[float | None]] = [[None] * n for n in n_conversations]
    lps: list[list[list[float] | None]] = [[None] * n for n in n_conversations]
    for r in rows:
        if r.advantages is not None:
            first = next((i for i, m in enumerate(r.loss_mask[1:]) if m), None)
            if first is not None:
                adv[r.episode][r.step] = float(r.advantages[first])
        if r.old_logprobs is not None:
            values = r.old_logprobs.detach().float().cpu().tolist()[: len(r) - 1]
            lps[r.episode][r.step] = [0.0] + [v if m else 0.0 for v, m in zip(values, r.loss_mask[1:])]
    return adv, lps


def drop_rollouts_after(run_dir: Path, step: int) -> int:
    """Delete ``rollouts/step_N.jsonl`` for N > ``step``, where a run resumes (``step``: its checkpoint; 0, a start
    over in a folder whose run had not saved one): they recorded steps of a history the run no longer has, and
    the viewer showed them beside the new run's. Returns the count deleted."""
    gone = 0
    for path in (Path(run_dir) / "rollouts").glob("step_*.jsonl"):
        number = path.stem[len("step_"):]
        if number.isdigit() and int(number) > step:
            path.unlink(missing_ok=True)
            gone += 1
    return gone


def sampled_version(traj: Trajectory, step: int) -> int:
    """The update count of the weights that sampled the episode: an asynchronous episode's oldest token's (its
    ``policy_versions`` segments); a synchronous step's episodes were all sampled by the weights before it."""
    versions = [v for n, v in traj.info.get("policy_versions") or [] if n]
    return min(versions) if versions else step - 1


def save_step_rollouts(run_dir: Path, step: int, trajs: Sequence[Trajectory], rows: Sequence[Any],
                       tokenizer: Any, n: int, seed: int) -> Path | None:
    """Write ``n`` of this step's episodes to ``run_dir/rollouts/step_NNNNNN.jsonl``; returns the path."""
    picks = pick_episodes([t.reward for t in trajs], n, seed * 1_000_003 + step)
    if not picks:
        return None
    adv, lps = row_views(rows, [t.num_conversations for t in trajs])
    masked = {(r.episode, r.step) for r in rows if getattr(r, "generated", None) is not None}
    path = Path(run_dir) / "rollouts" / f"step_{step:06d}.jsonl"
    with atomic_write(path) as fh:
        for i, why in picks:
            rec = rollout_record(trajs[i], tokenizer, step=step, version=sampled_version(trajs[i], step), pick=why,
                                 advantages=adv[i], trainer_logprobs=lps[i])
            for k, conv in enumerate(rec["conversations"]):
                if (i, k) in masked:  # no advantage shown: algorithm.mask_truncated_completions left it out
                    conv["masked_truncated"] = True
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path
