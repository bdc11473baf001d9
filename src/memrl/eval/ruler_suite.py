"""Evaluate a workflow on the RULER suite (``ruler_{task}_{length}.jsonl`` from ``memrl data ruler``).

Same contract as :func:`memrl.eval.runner.run_eval`, whose helpers it uses: finished
episodes are written atomically to ``OUT/episodes/{task}_{length}/{index}.json`` (a re-run
skips them), failures go to ``OUT/failures/`` and are retried next time, transcripts to
``OUT/transcripts/``; a dead engine stops the run, and so does a run in which every
episode failed. What differs is the score: RULER's ``string_match_all`` (NIAH, vt,
cwe, fwe: the fraction of gold strings in the answer) or ``string_match_part`` (QA: any
gold in the answer), case-insensitive substring tests on the answer the workflow extracted
(``\\boxed{}`` by default; the whole final response when nothing was extracted). Under
``eval.protocol memagent`` the scores are MemAgent's own (:func:`memrl.data.ruler_metric.memagent_score`:
QA is normalised sub-EM on the first gold, nothing extracted scores 0); the episodes on disk are
re-scored when the protocol changes. The report is a task x length table of mean scores (percent)
with the macro average over tasks per length, as MemAgent's RULER table.

Files written by ``memrl data ruler --protocol ruler`` carry RULER's whole prompt in ``input``
(haystack included) and the prompt without the haystack in ``question``: the agent is asked
``question``. Episodes are named by their line in the file, since RULER's niah ``index`` is a
character offset, not a sample number.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

from memrl.config.schema import MemRLConfig
from memrl.data import LongContextSample
from memrl.io.atomic import atomic_write
from memrl.data.ruler import TASKS, parse_file_name
from memrl.data.ruler_metric import memagent_score, prediction_text, score
from memrl.data.stream import read_samples_lazily
from memrl.engines.base import Engine, EngineDeadError
from memrl.eval.runner import (
    AllEpisodesFailedError,
    _fingerprint,
    _is_done,
    check_resume,
    episode_record,
    failure_record,
    gather_cancelling,
    sampling_params,
)
from memrl.eval.protocol_settings import PUBLISHED
from memrl.eval.report import empty_answer, percent
from memrl.eval.transcript import render_transcript
from memrl.types import Trajectory
from memrl.workflows import build_workflow

# Every top-level entry run_ruler_suite writes in ``out`` (for a caller's output manifest).
RULER_OUTPUTS = ("eval_config.yaml", "episodes", "failures", "transcripts", "results.json", "results.md")

Key = tuple[str, int]  # (task, length)


def find_ruler_files(data_dir: Path, lengths: list[int] | None = None,
                     tasks: list[str] | None = None) -> dict[Key, Path]:
    """``(task, length) -> file`` for the suite files in ``data_dir``, filtered; a requested one missing is an error."""
    if not data_dir.is_dir():
        raise FileNotFoundError(f"{data_dir}: no such folder (create RULER files with: memrl data ruler --out "
                                f"{data_dir} ...)")
    found: dict[Key, Path] = {}
    for path in sorted(data_dir.glob("ruler_*.jsonl")):
        key = parse_file_name(path.name)
        if key is not None and (tasks is None or key[0] in tasks) and (lengths is None or key[1] in lengths):
            found[key] = path
    have = sorted(p.name for p in data_dir.glob("ruler_*.jsonl"))
    hint = (f"in {data_dir} (found: {', '.join(have[:8]) + (' ...' if len(have) > 8 else '') or 'none'}); "
            f"create them with: memrl data ruler --out {data_dir} --tokenizer MODEL ...")
    for task in tasks or []:
        for length in lengths or []:
            if (task, length) not in found:
                raise FileNotFoundError(f"missing ruler_{task}_{length}.jsonl {hint}")
    if not found:
        raise FileNotFoundError(f"no ruler_{{task}}_{{length}}.jsonl files to run {hint}")
    _check_grid(found, data_dir)
    return dict(sorted(found.items(), key=lambda kv: (_task_order(kv[0][0]), kv[0][1])))


def _check_grid(found: dict[Key, Path], data_dir: Path) -> None:
    """Say so when a task is missing at some length: that length's average is then over other tasks than the
    next one's (an interrupted ``memrl data ruler`` leaves such a folder; results.md shows the holes blank)."""
    tasks, lengths = sorted({t for t, _ in found}), sorted({n for _, n in found})
    holes = [f"ruler_{t}_{n}.jsonl" for t in tasks for n in lengths if (t, n) not in found]
    if holes:
        more = f" and {len(holes) - 1} more" if len(holes) > 1 else ""
        print(f"warning: {data_dir} lacks {holes[0]}{more}: the averages of different lengths are over different "
              "tasks (an interrupted memrl data ruler? run it again)", file=sys.stderr, flush=True)


def _task_order(task: str) -> tuple[int, str]:
    names = list(TASKS)
    return (names.index(task), task) if task in names else (len(names), task)


def _folder(key: Key) -> str:
    return f"{key[0]}_{key[1]}"


def metric_for(sample: LongContextSample, task: str) -> str:
    """The sample's own metric field, else the task's (files written by hand may lack the field)."""
    metric = sample.extra.get("metric")
    return metric if isinstance(metric, str) else task_metric(task)


def task_metric(task: str) -> str:
    """RULER's metric for a task name; unknown (user-made) tasks are scored like NIAH."""
    return TASKS[task].metric if task in TASKS else "string_match_all"


def scored_prediction(info: dict[str, Any]) -> str:
    """The answer the workflow extracted (under ``workflow.answer_format``), else the final response (memrl's
    protocol: RULER scores the raw response; MemAgent's script scores 0 when nothing is extracted)."""
    answer = info.get("answer")
    if isinstance(answer, str) and answer.strip():
        return answer
    return prediction_text(info.get("final_text"))


def protocol_score(info: dict[str, Any], metric: str, golds: list[str], protocol: str = "memrl",
                   fmt: str = "boxed") -> tuple[str | None, float]:
    """(what was scored, its score) under ``eval.protocol``: MemAgent's ``ruler_general.py`` for a published
    protocol (ReMemR1 has no RULER script; its answer scoring is MemAgent's code), memrl's otherwise."""
    if protocol in PUBLISHED:
        return memagent_score(metric, info.get("final_text"), golds, fmt)
    prediction = scored_prediction(info)
    return prediction, score(metric, prediction, golds)


def ruler_record(traj: Trajectory, sample: LongContextSample, key: Key, seconds: float, protocol: str = "memrl",
                 fmt: str = "boxed") -> dict[str, Any]:
    """The runner's episode record plus the RULER score of its final answer."""
    metric = metric_for(sample, key[0])
    prediction, value = protocol_score(traj.info, metric, sample.answers, protocol, fmt)
    return {**episode_record(traj, sample.num_docs, seconds), "task": key[0], "length": key[1],
            "metric": metric, "prediction": prediction, "ruler_score": value, "protocol": protocol}


def agent_sample(sample: LongContextSample, position: int) -> LongContextSample:
    """The sample the agent sees: RULER-protocol files ask ``question`` (the prompt less its haystack)."""
    question = sample.extra.get("question")
    if isinstance(question, str) and question.strip():
        sample.question = question
    sample.index = position  # set in place: a sample read lazily keeps its context on disk
    return sample


def _unfinished(files: dict[Key, Path], out: Path,
                max_samples: int | None) -> list[tuple[Key, LongContextSample]]:
    """The (task, length) samples with no finished episode under ``out``, contexts left on disk until run."""
    todo: list[tuple[Key, LongContextSample]] = []
    for key, path in files.items():
        for position, sample in enumerate(islice(read_samples_lazily(path), max_samples)):
            if not _is_done(out / "episodes" / _folder(key) / f"{position}.json"):
                todo.append((key, agent_sample(sample, position)))
    return todo


def _write_episode(out: Path, key: Key, sample: LongContextSample, traj: Trajectory, tokenizer: Any,
                   seconds: float, error: str | None, protocol: str = "memrl", fmt: str = "boxed") -> None:
    """The transcript, and the episode record or (``error``) the failure record that a resume retries."""
    name = f"{_folder(key)}/{sample.index}"
    with atomic_write(out / "transcripts" / f"{name}.txt") as fh:
        fh.write(render_transcript(traj, tokenizer, f"{key[0]} at {key[1]} tokens, sample {sample.index}"))
    failure = out / "failures" / f"{name}.json"
    if error is None:
        with atomic_write(out / "episodes" / f"{name}.json") as fh:
            json.dump(ruler_record(traj, sample, key, seconds, protocol, fmt), fh)
        failure.unlink(missing_ok=True)
    else:
        with atomic_write(failure) as fh:
            json.dump({**failure_record(sample, sample.num_docs, seconds, error), "task": key[0],
                       "length": key[1]}, fh)


async def run_ruler_suite(cfg: MemRLConfig, engine: Engine, tokenizer: Any, data_dir: Path, out: Path, *,
                          lengths: list[int] | None, tasks: list[str] | None, max_samples: int | None,
                          on_start: Callable[[int, int], None] | None = None,
                          on_episode: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run every (task, length, sample) not finished on disk; write and return the aggregated results.

    ``lengths``/``tasks`` filter the files found in ``data_dir`` (``None``: all of them); ``on_start(total,
    done)`` and ``on_episode()`` drive a progress line (the episodes this run has to do).
    Raises :class:`EngineDeadError` (reports written first) when the engine is gone and
    :class:`AllEpisodesFailedError` when nothing this run attempted finished.
    """
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"max_samples must be >= 1 (or None for all), got {max_samples}")
    files = find_ruler_files(data_dir, lengths, tasks)
    out.mkdir(parents=True, exist_ok=True)
    check_resume(out, cfg)
    workflow = build_workflow(cfg)
    sampling = sampling_params(cfg)
    todo = _unfinished(files, out, max_samples)
    if on_start:
        on_start(len(todo), 0)
    sem = asyncio.Semaphore(cfg.engine.concurrency)
    errors: list[str] = []
    dead = asyncio.Event()

    async def one(key: Key, sample: LongContextSample) -> None:
        async with sem:
            if dead.is_set():
                return
            t0 = time.perf_counter()
            try:
                traj = await workflow.episode(sample, engine=engine, tokenizer=tokenizer, sampling=sampling)
                error = None
            except EngineDeadError:
                dead.set()
                raise
            except Exception as exc:  # one broken episode must not stop the suite
                error = "".join(traceback.format_exception_only(exc)).strip()
                traj = Trajectory([], 0.0, str(sample.index), str(sample.index),
                                  info={"question": sample.question, "answers": sample.answers, "error": error})
            _write_episode(out, key, sample, traj, tokenizer, time.perf_counter() - t0, error, cfg.eval.protocol,
                           cfg.workflow.answer_format)
            if error is not None:
                errors.append(error)
        if on_episode:
            on_episode()

    try:
        await gather_cancelling(one(k, s) for k, s in todo)
    except EngineDeadError:
        aggregate_ruler(cfg, out, list(files))  # what finished stays reported
        raise
    results = aggregate_ruler(cfg, out, list(files))
    if todo and len(errors) == len(todo):
        raise AllEpisodesFailedError(f"all {len(todo)} episodes of this run failed; the first: {errors[0]}")
    return results


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 2) if values else None


def _counted(episode: dict[str, Any], protocol: str) -> bool:
    """MemAgent's ruler_general.py skips an item whose response is empty (``if output == '': continue``)."""
    return protocol not in PUBLISHED or not empty_answer(episode)


def _rescored(episode: dict[str, Any], protocol: str, fmt: str) -> dict[str, Any]:
    """The episode scored under ``protocol``, recomputed from its final text every time (a folder written by an
    earlier memrl may hold scores its label no longer means: ``rememr1`` was scored as ``memrl``)."""
    info = episode.get("info") or {}
    if not info.get("answers") or "final_text" not in info:
        return episode
    prediction, value = protocol_score(info, episode["metric"], list(info["answers"]), protocol, fmt)
    return {**episode, "prediction": prediction, "ruler_score": value, "protocol": protocol}


def aggregate_ruler(cfg: MemRLConfig, out: Path, keys: list[Key]) -> dict[str, Any]:
    """Scores of what is on disk, per task and length, and the average over tasks per length."""
    by_task: dict[str, dict[str, dict[str, Any]]] = {}
    for key in keys:
        folder = out / "episodes" / _folder(key)
        eps = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
        eps = [_rescored(e, cfg.eval.protocol, cfg.workflow.answer_format) for e in eps if "ruler_score" in e]
        done = {p.stem for p in folder.glob("*.json")}
        failed = {p.stem for p in (out / "failures" / _folder(key)).glob("*.json")} - done
        tokens = [e["metrics"].get("context_tokens_original", e["metrics"].get("context_tokens", 0.0)) for e in eps]
        scored = [e["ruler_score"] for e in eps if _counted(e, cfg.eval.protocol)]
        by_task.setdefault(key[0], {})[str(key[1])] = {
            "score": percent(scored), "skipped_empty": len(eps) - len(scored),
            "samples": len(eps) + len(failed), "finished": len(eps), "failed": len(failed),
            "metric": eps[0]["metric"] if eps else task_metric(key[0]),
            "context_tokens": round(statistics.fmean(tokens), 1) if tokens else None,
        }
    lengths = sorted({k[1] for k in keys})
    average = {}
    for n in lengths:
        scores = [row[str(n)]["score"] for row in by_task.values() if row.get(str(n), {}).get("score") is not None]
        average[str(n)] = _mean(scores)
    results = {"suite": "ruler", "protocol": cfg.eval.protocol, "model": cfg.model.path, "workflow": cfg.workflow.name, "engine": cfg.engine.kind,
               "lengths": lengths, "tasks": list(by_task), "by_task": by_task, "average": average,
               "config": _fingerprint(cfg)}
    with atomic_write(out / "results.json") as fh:
        json.dump(results, fh, indent=2)
        fh.write("\n")
    with atomic_write(out / "results.md") as fh:
        fh.write(markdown_table(results))
    return results


def _length_label(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else f"{n:,}"


def markdown_table(results: dict[str, Any]) -> str:
    """Rows = tasks, columns = lengths, cells = RULER score %; a last row averages the tasks."""
    lengths = results["lengths"]
    head = "| task | metric | " + " | ".join(_length_label(n) for n in lengths) + " |"
    scoring = ("MemAgent's ruler_general.py scoring: string_match_all; QA sub-EM on the first gold; empty answers "
               "skipped" if results.get("protocol") in PUBLISHED else
               "memrl's: string_match_all; QA string_match_part, on the boxed answer or else the response")
    lines = [f"**{results['workflow']}** on `{results['model']}`: RULER (score %, {scoring})", "", head,
             "|---|---|" + "---:|" * len(lengths)]
    failed = 0
    for task, row in results["by_task"].items():
        cells = []
        for n in lengths:
            r = row.get(str(n))
            if r is None:
                cells.append("")
                continue
            failed += r["failed"]
            cell = "-" if r["score"] is None else f"{r['score']:.2f}"
            cells.append(cell + (f" ({r['failed']} failed)" if r["failed"] else ""))
        metric = next((r["metric"] for r in row.values()), "")
        lines.append(f"| {task} | {metric.replace('string_match_', '')} | " + " | ".join(cells) + " |")
    avg = results["average"]
    lines.append("| **average** | | " + " | ".join("-" if avg[str(n)] is None else f"**{avg[str(n)]:.2f}**"
                                                   for n in lengths) + " |")
    if failed:
        lines += ["", f"Scores are over finished episodes only: {failed} failed episode(s) are not counted "
                  "(see failures/; re-running the same command retries them)."]
    return "\n".join(lines) + "\n"
