"""Run a workflow over eval files of several sizes, resumably.

Each finished episode is written atomically to ``OUT/episodes/{docs}/{index}.json``
with its transcript in ``OUT/transcripts/{docs}/{index}.txt``; a re-run skips
episodes already on disk, so an interrupted eval loses at most the episodes in
flight. An episode that raises is recorded as an error (scored 0) and the run
goes on.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from memrl.config import ConfigError
from memrl.config.schema import MemRLConfig
from memrl.data import LongContextSample, read_samples
from memrl.data.atomic import atomic_write
from memrl.engines.base import Engine, SamplingParams
from memrl.eval.report import summarize, write_reports
from memrl.eval.transcript import render_transcript
from memrl.types import Trajectory
from memrl.workflows import get_workflow


def find_eval_file(data_dir: Path, n: int) -> Path:
    for ext in ("json", "jsonl", "parquet"):
        p = data_dir / f"eval_{n}.{ext}"
        if p.is_file():
            return p
    found = sorted(p.name for p in data_dir.glob("eval_*.*")) if data_dir.is_dir() else []
    raise FileNotFoundError(f"no eval_{n}.json/.jsonl/.parquet in {data_dir} (found: {', '.join(found) or 'none'}); "
                            f"create it with: memrl data synth --docs {n} --out {data_dir} ...")


def sampling_params(cfg: MemRLConfig) -> SamplingParams:
    s = cfg.sampling
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, seed=s.seed)


def _fingerprint(cfg: MemRLConfig) -> dict[str, Any]:
    """The settings that change answers: results from different ones must not mix."""
    return {"model": cfg.model.model_dump(), "workflow": cfg.workflow.model_dump(),
            "sampling": cfg.sampling.model_dump()}


def check_resume(out: Path, cfg: MemRLConfig) -> None:
    path = out / "eval_config.yaml"
    fp = _fingerprint(cfg)
    if path.is_file():
        old = yaml.safe_load(path.read_text())
        if old != fp:
            diff = [f"{sec}.{k}" for sec in fp for k in fp[sec] if (old.get(sec) or {}).get(k) != fp[sec][k]]
            raise ConfigError(f"{out} holds results of a different config (changed: {', '.join(diff)}); "
                              "use another --out or pass --restart")
    else:
        with atomic_write(path) as fh:
            yaml.safe_dump(fp, fh, sort_keys=False)


def episode_record(traj: Trajectory, n: int, seconds: float, error: str | None = None) -> dict[str, Any]:
    return {
        "docs": n, "sample_id": traj.sample_id, "reward": traj.reward, "metrics": traj.metrics,
        "info": traj.info, "seconds": round(seconds, 3), "error": error,
        "conversations": [{"prompt_tokens": c.prompt_length, "response_tokens": c.num_generated, **c.meta}
                          for c in traj.conversations],
    }


async def run_eval(
    cfg: MemRLConfig,
    engine: Engine,
    tokenizer: Any,
    data_dir: Path,
    docs: Sequence[int],
    out: Path,
    *,
    max_samples: int | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_episode: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Evaluate every (docs, sample) not yet on disk; return the aggregated results."""
    workflow = get_workflow(cfg.workflow.name)
    sampling = sampling_params(cfg)
    files = {n: find_eval_file(data_dir, n) for n in docs}
    todo: list[tuple[int, LongContextSample, Path]] = []
    total = 0
    for n, path in files.items():
        samples = list(read_samples(path))[:max_samples]
        total += len(samples)
        for s in samples:
            dest = out / "episodes" / str(n) / f"{s.index}.json"
            if not dest.is_file():
                todo.append((n, s, dest))
    if on_start:
        on_start(total, total - len(todo))
    sem = asyncio.Semaphore(cfg.engine.concurrency)

    async def one(n: int, sample: LongContextSample, dest: Path) -> None:
        async with sem:
            t0 = time.perf_counter()
            try:
                traj = await workflow(sample, engine, tokenizer, cfg.workflow, sampling=sampling)
                error = None
            except Exception as exc:  # one broken episode must not stop the eval
                traj = Trajectory([], 0.0, str(sample.index), str(sample.index),
                                  metrics={"em": 0.0, "sub_em": 0.0, "f1": 0.0, "answered": 0.0},
                                  info={"question": sample.question, "answers": sample.answers,
                                        "error": "".join(traceback.format_exception_only(exc)).strip()})
                error = traj.info["error"]
            record = episode_record(traj, n, time.perf_counter() - t0, error)
            tpath = out / "transcripts" / str(n) / f"{sample.index}.txt"
            with atomic_write(tpath) as fh:
                fh.write(render_transcript(traj, tokenizer, f"sample {sample.index} ({n} docs)"))
            with atomic_write(dest) as fh:  # written last: its presence marks the episode done
                json.dump(record, fh)
            if on_episode:
                on_episode()

    await asyncio.gather(*(one(n, s, d) for n, s, d in todo))
    return aggregate(cfg, out, list(files))


def aggregate(cfg: MemRLConfig, out: Path, docs: Sequence[int]) -> dict[str, Any]:
    by_docs = {}
    for n in docs:
        eps = [json.loads(p.read_text()) for p in sorted((out / "episodes" / str(n)).glob("*.json"))]
        by_docs[str(n)] = summarize(eps)
    results = {"model": cfg.model.path, "workflow": cfg.workflow.name, "engine": cfg.engine.kind,
               "by_docs": by_docs, "config": _fingerprint(cfg)}
    write_reports(results, out)
    return results
