"""``memrl eval`` of any workflow on one file of samples: mean reward, pass^k over repeats, every metric.

The file is the workflow's ``eval`` samples (``data.eval_file``, or ``--data FILE``): plain
records for your own workflow or the ``agent`` workflow, long-context samples for the QA
workflows. Each (sample, repeat) is one episode with its own seed; finished episodes are
kept in ``OUT/episodes`` and skipped when the eval is run again, failed ones are written to
``OUT/failures`` with the error and tried again.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memrl.config import MemRLConfig
from memrl.engines.base import Engine
from memrl.eval.passk import is_success, pass_hat_ks
from memrl.eval.records import ROLLOUTS, finished_episode, save_eval_rollout
from memrl.eval.runner import (AllEpisodesFailedError, episode_name, gather_cancelling, repeat_sampling, rescore,
                               sampling_params)
from memrl.rewards.published import METRIC_LABELS
from memrl.io.atomic import atomic_write
from memrl.train.rollout import metric_means, one_line, own_failure
from memrl.types import Trajectory
from memrl.workflows import samples_of
from memrl.workflows.api import Workflow

WORKFLOW_EVAL_OUTPUTS = ("eval_config.yaml", "episodes", "failures", ROLLOUTS, "results.json", "results.md",
                         "online.json")


async def run_workflow_eval(cfg: MemRLConfig, engine: Engine, tokenizer: Any, workflow: Workflow, out: Path, *,
                            on_start: Callable[[int, int], None] | None = None,
                            on_episode: Callable[[], None] | None = None, rollouts: bool = True,
                            max_samples: int | None = None, samples: list[Any] | None = None) -> dict[str, Any]:
    """Run every (sample, repeat) not finished yet (of the first ``max_samples`` samples, or of ``samples``
    read by :func:`eval_samples`), then summarise them."""
    samples = samples if samples is not None else eval_samples(cfg, workflow, max_samples)
    repeats, base = cfg.eval.repeats, sampling_params(cfg)
    todo = [(i, r) for i in range(len(samples)) for r in range(repeats)
            if finished_episode(out / "episodes" / f"{episode_name(i, r)}.json") is None]
    if on_start:
        on_start(len(samples) * repeats, len(samples) * repeats - len(todo))
    sem = asyncio.Semaphore(cfg.engine.concurrency)

    async def one(i: int, r: int) -> None:
        name = episode_name(i, r)
        async with sem:
            t0 = time.perf_counter()
            try:
                traj = await workflow.episode(samples[i], engine=engine, tokenizer=tokenizer,
                                              sampling=repeat_sampling(base, r), sample_id=str(i), group_id=str(i))
            except BaseException as exc:  # recorded, not scored, tried again by the next run
                if not own_failure(exc):
                    raise  # a dead engine, Ctrl-C
                _failure(out, name, exc, time.perf_counter() - t0)
            else:
                _finished(out, name, traj, time.perf_counter() - t0, tokenizer if rollouts else None)
        if on_episode:
            on_episode()

    await gather_cancelling(one(i, r) for i, r in todo)
    results = summarise(cfg, out, len(samples))
    if todo and not results["episodes"]:
        last = sorted((out / "failures").glob("*.json"))[-1]
        error = json.loads(last.read_text(encoding="utf-8"))["error"]
        raise AllEpisodesFailedError(f"all {results['failed']} episodes failed (last: {error})")
    return results


def eval_samples(cfg: MemRLConfig, workflow: Workflow, max_samples: int | None = None) -> list[Any]:
    """The first ``max_samples`` eval samples of ``workflow``; none at all is an error."""
    samples = samples_of(workflow, "eval")[:max_samples]
    if not samples:
        raise ValueError(f"no eval samples: {workflow.data_source(cfg, 'eval')}")
    return samples


def _finished(out: Path, name: str, traj: Trajectory, seconds: float, tokenizer: Any) -> None:
    record = {"sample": int(traj.sample_id), "reward": traj.reward, "metrics": traj.metrics,
              "info": {k: v for k, v in traj.info.items() if _jsonable(v)}, "seconds": round(seconds, 3)}
    if tokenizer is not None:
        save_eval_rollout(out, name, traj, tokenizer, {"sample": traj.sample_id})
    _write(out / "episodes" / f"{name}.json", json.dumps(record, ensure_ascii=False))
    (out / "failures" / f"{name}.json").unlink(missing_ok=True)


def _failure(out: Path, name: str, exc: BaseException, seconds: float) -> None:
    text = "".join(traceback.format_exception(exc)).strip()
    _write(out / "failures" / f"{name}.json",
           json.dumps({"error": one_line(exc), "traceback": text, "seconds": round(seconds, 3)}))


def _write(path: Path, text: str) -> None:
    with atomic_write(path) as fh:  # its folder is made as needed
        fh.write(text)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def summarise(cfg: MemRLConfig, out: Path, num_samples: int) -> dict[str, Any]:
    """results.json / results.md from every finished episode in ``out``."""
    protocol, fmt = cfg.eval.protocol, cfg.workflow.answer_format
    # a QA workflow's episodes are scored under eval.protocol as the folder suite scores them: the paper configs
    # name one eval file, and this path used to report memrl's own em/sub_em/f1 under a published protocol
    records = [rescore(json.loads(p.read_text(encoding="utf-8")), protocol, fmt)
               for p in sorted((out / "episodes").glob("*.json"))]
    rescored = protocol != "memrl" and any("final_text" in (r.get("info") or {}) for r in records)
    failed = len(list((out / "failures").glob("*.json"))) if (out / "failures").is_dir() else 0
    outcomes: dict[str, list[bool]] = {}
    for rec in records:
        outcomes.setdefault(str(rec["sample"]), []).append(is_success(rec["reward"]))
    results = {
        "model": cfg.model.path, "workflow": cfg.workflow.name, "engine": cfg.engine.kind,
        "samples": num_samples, "repeats": cfg.eval.repeats, "episodes": len(records), "failed": failed,
        "mean_reward": statistics.fmean(r["reward"] for r in records) if records else None,
        "accuracy": 100.0 * statistics.fmean(is_success(r["reward"]) for r in records) if records else None,
        "pass_hat_k": {str(k): v for k, v in pass_hat_ks(outcomes).items()} if outcomes else {},
        "metrics": metric_means([r.get("metrics", {}) for r in records]),
    }
    if rescored:
        results.update(protocol=protocol, metric=METRIC_LABELS[protocol], answer_format=fmt)
    _write(out / "results.json", json.dumps(results, indent=2))
    _write(out / "results.md", _markdown(results))
    return results


def _markdown(res: dict[str, Any]) -> str:
    fmt = (lambda v: "n/a" if v is None else f"{v:.4g}")  # noqa: E731
    lines = [f"**{res['workflow']}** on `{res['model']}` ({res['engine']}): {res['episodes']} episodes of "
             f"{res['samples']} samples x {res['repeats']} repeats, {res['failed']} failed"
             + (f"; em/sub_em/f1 scored as the {res['protocol']} paper does ({res['metric']})" if "protocol" in res
                else ""), "",
             "| measure | value |", "|---|---|", f"| mean reward | {fmt(res['mean_reward'])} |",
             f"| accuracy (reward 1) % | {fmt(res['accuracy'])} |"]
    lines += [f"| pass^{k} | {fmt(v)} |" for k, v in res["pass_hat_k"].items()]
    lines += [f"| {k} | {fmt(v)} |" for k, v in res["metrics"].items()]
    return "\n".join(lines) + "\n"
