"""Run a workflow over eval files of several sizes, resumably.

Each finished episode is written atomically to ``OUT/episodes/{docs}/{index}.json``
with its transcript in ``OUT/transcripts/{docs}/{index}.txt`` and its tokens as a rollout
record in ``OUT/rollouts/{docs}/{index}.jsonl`` (see :mod:`memrl.eval.records`); a re-run skips
episodes already on disk, so an interrupted eval loses at most the episodes in
flight. An episode that raises (a timeout, an HTTP 401) says nothing about the
model, so it is not scored: it is recorded in ``OUT/failures/{docs}/{index}.json``,
reported as a failure count next to the accuracy, and tried again by the next
run. An :class:`~memrl.engines.base.EngineDeadError` stops the whole run, and so
does a run in which every episode failed: more of the same would only fill the
failure list.

With ``eval.repeats=K`` each question is answered K times (repeat r > 0 is stored as
``{index}@{r}.json``, so raising K later keeps the episodes already run). Scores are
computed when results are aggregated, from each episode's final text, under
``eval.protocol`` (see :mod:`memrl.rewards.published`): switching protocol re-scores the
same episodes without running them again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from memrl.config import ConfigError
from memrl.config.schema import MemRLConfig
from memrl.data import LongContextSample
from memrl.io.atomic import atomic_write
from memrl.data.stream import read_samples_lazily
from memrl.engines.base import Engine, EngineDeadError, SamplingParams
from memrl.eval.files import check_eval_file, match_eval_file, merged_data
from memrl.eval.protocol_settings import PUBLISHED, PUBLISHED_SAMPLING, with_eval_sampling  # noqa: F401 (re-exported)
from memrl.eval.records import ROLLOUTS, finished_episode, save_eval_rollout
from memrl.eval.report import summarize, write_reports
from memrl.eval.transcript import render_transcript
from memrl.rewards.published import METRIC_LABELS, score_protocol
from memrl.train.rollout import one_line, own_failure
from memrl.types import Trajectory
from memrl.workflows import build_workflow


def find_eval_file(data_dir: Path, n: int) -> Path:
    """``eval_{n}.*`` in a folder, or ReMemR1's ``eval_{dataset}_{n}`` files (see :mod:`memrl.eval.files`)."""
    found_file = match_eval_file(data_dir, n)
    if found_file is not None:
        return check_eval_file(found_file)
    found = sorted(p.name for p in data_dir.glob("eval_*.*")) if data_dir.is_dir() else []
    raise FileNotFoundError(f"no eval_{n}.json/.jsonl/.parquet in {data_dir} (found: {', '.join(found) or 'none'}); "
                            f"create it with: memrl data synth --docs {n} --out {data_dir} ...")


def sampling_params(cfg: MemRLConfig) -> SamplingParams:
    s = cfg.sampling
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, seed=s.seed)


def recorded_settings(out: Path) -> dict[str, Any] | None:
    """The answer-changing settings ``out`` holds results of (``eval_config.yaml``), or None (also when it
    holds no result yet: a start that failed early decides nothing)."""
    if not _holds_results(out):
        return None
    try:
        found = yaml.safe_load((out / "eval_config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return found if isinstance(found, dict) else None


def repeat_sampling(params: SamplingParams, repeat: int) -> SamplingParams:
    """Repeat r > 0 of a seeded eval gets its own seed (repeat 0 keeps the configured one)."""
    if repeat == 0 or params.seed is None:
        return params
    return params.with_(seed=params.seed + 7919 * repeat)


def episode_name(index: object, repeat: int) -> str:
    return str(index) if repeat == 0 else f"{index}@{repeat}"


def _fingerprint(cfg: MemRLConfig) -> dict[str, Any]:
    """The settings that change answers: results from different ones must not mix."""
    fp = {"model": cfg.model.model_dump(), "workflow": cfg.workflow.resolved(),
          "sampling": cfg.sampling.model_dump()}
    if cfg.workflow.build().uses_env:  # the domain, split and grading decide the scores too
        fp["env"] = cfg.env.model_dump()
    return fp


# Every top-level entry ``memrl eval`` writes in --out (recorded so --restart deletes only these).
EVAL_OUTPUTS = ("eval_config.yaml", "episodes", "failures", "transcripts", ROLLOUTS, "results.json", "results.md",
                "accuracy.png")


def check_resume(out: Path, cfg: MemRLConfig, data: dict[str, str] | None = None) -> None:
    """Refuse results of another config in ``out``; a new folder records ``cfg``'s settings (and ``data``,
    :func:`~memrl.eval.files.data_record`, or ``{"by_docs": {N: record}}`` for eval_N files), an older folder
    without a data record gets this one; results of other or changed data are refused
    (:func:`~memrl.eval.files.merged_data`)."""
    path = out / "eval_config.yaml"
    fp = _fingerprint(cfg)
    if path.is_file() and _holds_results(out):  # a start that failed before any result has nothing to protect
        try:
            old = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is unreadable ({type(exc).__name__}): restore it, or pass --restart to start "
                              "this folder over, or use another --out") from None
        old = old if isinstance(old, dict) else {}
        was_data = old.pop("data", None)
        old = _with_new_defaults(old, fp, cfg)
        if old != fp:
            raise ConfigError(f"{out} holds results of a different config (changed: {_changes(old, fp)}); "
                              "use another --out or pass --restart")
        if data is None or was_data == data:
            return
        data = merged_data(out, was_data, data)  # an older folder without a data record gets this one
        if data == was_data:  # a run of some of the sizes recorded
            return
    with atomic_write(path) as fh:
        yaml.safe_dump({**fp, **({"data": data} if data else {})}, fh, sort_keys=False)


def _changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """``workflow.options.chunk_tokens (64 -> 32), ...``: each leaf setting that differs, as a resumed run names
    them (a section name alone left the user to find which of its options moved)."""
    from memrl.train.preflight import flat_settings

    was, now = flat_settings(old), flat_settings(new)
    keys = [k for k in now if was.get(k, "(unset)") != now[k]] + [k for k in was if k not in now]
    return ", ".join(f"{k} ({was.get(k, '(unset)')!r} -> {now.get(k, '(unset)')!r})" for k in keys)


def _with_new_defaults(old: dict[str, Any], fp: dict[str, Any], cfg: MemRLConfig) -> dict[str, Any]:
    """``old`` (a folder's recorded settings) with the settings memrl gained since it was written filled in where
    they hold their default now: that folder ran as the default does (a new option must not lock old results)."""
    models = {"model": cfg.model, "sampling": cfg.sampling, "env": cfg.env, "options": cfg.workflow.opts}

    def fill(was: Any, now: dict[str, Any], model: Any) -> Any:
        if not isinstance(was, dict) or model is None:
            return was
        fields = type(model).model_fields
        added = {k: v for k, v in now.items() if k not in was and k in fields and not fields[k].is_required()
                 and _dumped(fields[k].get_default(call_default_factory=True)) == v}
        return {**was, **added}

    out = {sec: fill(was, fp.get(sec) or {}, models.get(sec)) for sec, was in old.items()}
    wf = out.get("workflow")
    if isinstance(wf, dict) and isinstance(wf.get("options"), dict):
        out["workflow"] = {**wf, "options": fill(wf["options"], fp["workflow"]["options"], models["options"])}
    return out


def _dumped(value: Any) -> Any:
    """A default as ``model_dump(mode="json")`` writes it (a nested model as its dict)."""
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def _holds_results(out: Path) -> bool:
    """Whether ``out`` holds any finished or failed episode, or a results file."""
    if (out / "results.json").is_file():
        return True
    return any(p.is_file() for sub in ("episodes", "failures", ROLLOUTS) for p in (out / sub).rglob("*"))


def episode_record(traj: Trajectory, n: int, seconds: float) -> dict[str, Any]:
    return {
        "docs": n, "sample_id": traj.sample_id, "reward": traj.reward, "metrics": traj.metrics,
        "info": traj.info, "seconds": round(seconds, 3),
        "conversations": [{"prompt_tokens": c.prompt_length, "response_tokens": c.num_generated, **c.meta}
                          for c in traj.conversations],
    }


def failure_record(sample: LongContextSample, n: int, seconds: float, error: str) -> dict[str, Any]:
    return {"docs": n, "sample_id": str(sample.index), "question": sample.question, "error": error,
            "seconds": round(seconds, 3)}


def ending_counts(records: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many tool-agent episodes ended each way; ``prompt_too_long``: cut before the agent's first turn."""
    counts: dict[str, int] = {}
    for r in records:
        cut = (r.get("metrics") or {}).get("prompt_too_long")
        why = "prompt_too_long" if cut else str((r.get("info") or {}).get("ending"))
        counts[why] = counts.get(why, 0) + 1
    return dict(sorted(counts.items()))


def endings_note(endings: dict[str, int], max_total_tokens: int) -> list[str]:
    """Lines for the console and results.md: the episode endings, and a warning when some never started."""
    if not endings:
        return []
    lines = ["episode endings: " + ", ".join(f"{k} {v}" for k, v in endings.items())]
    cut = endings.get("prompt_too_long", 0)
    if cut:
        share = "every one" if cut == sum(endings.values()) else f"{cut} of {sum(endings.values())}"
        lines.append(f"warning: {share} of the trials ended before the agent's first turn (prompt_too_long: the "
                     f"prompt exceeds workflow.options.max_total_tokens={max_total_tokens}); their reward 0 says "
                     "nothing about the model: raise workflow.options.max_total_tokens")
    return lines


class AllEpisodesFailedError(RuntimeError):
    """Every episode this run attempted failed: the setup is broken, not the model."""


def _is_done(dest: Path) -> bool:
    """An episode file marks a finished episode; one with an ``error`` is a failure an older memrl saved."""
    record = finished_episode(dest)  # a damaged one is set aside and redone
    if record is None:
        return False
    if not record.get("error"):
        return True
    dest.unlink()
    return False


EvalFiles = dict[int, tuple[Path, list[LongContextSample]]]


def read_eval_files(data_dir: Path, docs: Sequence[int], max_samples: int | None = None) -> EvalFiles:
    """Each size's eval file and its first ``max_samples`` samples. ``memrl eval`` reads them before any model
    loads, so a missing file or a record without a required field fails in one line naming the file and the
    row, with nothing written to ``--out`` (it used to fail after the engine loaded, leaving eval_config.yaml)."""
    found: EvalFiles = {}
    for n in docs:
        path = find_eval_file(data_dir, n)
        samples = list(read_samples_lazily(path))[:max_samples]  # contexts stay on disk until an episode reads them
        if not samples:
            raise ValueError(f"{path}: the eval file holds no samples")
        found[n] = (path, samples)
    return found


def _todo(files: EvalFiles, out: Path, repeats: int) -> tuple[list[tuple[int, LongContextSample, int]], int]:
    """The (docs, sample, repeat) episodes not finished on disk, and how many there are in all."""
    todo: list[tuple[int, LongContextSample, int]] = []
    total = 0
    for n, (_, samples) in files.items():
        total += len(samples) * repeats
        todo += [(n, s, r) for s in samples for r in range(repeats)
                 if not _is_done(out / "episodes" / str(n) / f"{episode_name(s.index, r)}.json")]
    return todo, total


def reported_sizes(out: Path, docs: Iterable[int]) -> list[int]:
    """The sizes results.md reports: those run now, and those an earlier run finished episodes of in ``out``
    (a re-run with fewer ``--docs`` rewrote the reports with its sizes only, though the others were on disk)."""
    folder = out / "episodes"
    earlier = {int(p.name) for p in folder.iterdir() if p.name.isdigit() and any(p.glob("*.json"))} \
        if folder.is_dir() else set()
    return sorted(set(docs) | earlier)


def _failed_trajectory(sample: LongContextSample, error: str) -> Trajectory:
    return Trajectory([], 0.0, str(sample.index), str(sample.index),
                      info={"question": sample.question, "answers": sample.answers, "error": error})


def _write_episode(out: Path, tokenizer: Any, traj: Trajectory, sample: LongContextSample, n: int, repeat: int,
                   seconds: float, error: str | None, rollouts: bool) -> None:
    """The transcript, then the rollout and the episode file (which marks it done) or the failure file."""
    name = f"{n}/{episode_name(sample.index, repeat)}"
    title = f"sample {sample.index} ({n} docs)" + (f", repeat {repeat}" if repeat else "")
    with atomic_write(out / "transcripts" / f"{name}.txt") as fh:
        fh.write(render_transcript(traj, tokenizer, title))
    failure = out / "failures" / f"{name}.json"
    if error is None:
        if rollouts:  # before the episode file, which marks the episode done
            save_eval_rollout(out, name, traj, tokenizer, {"docs": n, "repeat": repeat})
        with atomic_write(out / "episodes" / f"{name}.json") as fh:  # its presence marks the episode done
            json.dump({**episode_record(traj, n, seconds), "repeat": repeat}, fh)
        failure.unlink(missing_ok=True)
    else:
        with atomic_write(failure) as fh:
            json.dump(failure_record(sample, n, seconds, error), fh)


async def run_eval(cfg: MemRLConfig, engine: Engine, tokenizer: Any, data_dir: Path, docs: Sequence[int], out: Path,
                   *, max_samples: int | None = None, on_start: Callable[[int, int], None] | None = None,
                   on_episode: Callable[[], None] | None = None, rollouts: bool = True,
                   files: EvalFiles | None = None) -> dict[str, Any]:
    """Evaluate every (docs, sample) not finished on disk; return the aggregated results (of every size with
    finished episodes in ``out``, :func:`reported_sizes`).

    ``files``: what :func:`read_eval_files` read already (``max_samples`` applied), else it is read here.
    ``rollouts=False`` skips the rollout records (token ids of every conversation: large for long
    contexts). Raises :class:`EngineDeadError` (reports written first) when the engine is gone and
    :class:`AllEpisodesFailedError` when nothing this run attempted finished.
    """
    if max_samples is not None and max_samples < 1:
        raise ValueError(f"max_samples must be >= 1 (or None for all), got {max_samples}")
    workflow = build_workflow(cfg)
    sampling = sampling_params(cfg)
    files = files if files is not None else read_eval_files(data_dir, docs, max_samples)
    todo, total = _todo(files, out, cfg.eval.repeats)
    if on_start:
        on_start(total, total - len(todo))
    sem = asyncio.Semaphore(cfg.engine.concurrency)
    errors: list[str] = []
    dead = asyncio.Event()  # set when the engine is gone: queued episodes must not start

    async def one(n: int, sample: LongContextSample, repeat: int) -> None:
        async with sem:
            if dead.is_set():
                return
            t0 = time.perf_counter()
            try:
                traj = await workflow.episode(sample, engine=engine, tokenizer=tokenizer,
                                              sampling=repeat_sampling(sampling, repeat))
                error = None
            except BaseException as exc:  # one broken episode must not stop the eval
                if not own_failure(exc):
                    dead.set()  # a dead engine or Ctrl-C: queued episodes must not start
                    raise
                error = one_line(exc)
                traj = _failed_trajectory(sample, error)
            _write_episode(out, tokenizer, traj, sample, n, repeat, time.perf_counter() - t0, error, rollouts)
            if error is not None:
                errors.append(error)
            if on_episode:
                on_episode()

    try:
        await gather_cancelling(one(n, s, r) for n, s, r in todo)
    except EngineDeadError:
        aggregate(cfg, out, reported_sizes(out, files))  # what finished stays reported
        raise
    results = aggregate(cfg, out, reported_sizes(out, files))
    if todo and len(errors) == len(todo):
        raise AllEpisodesFailedError(f"all {len(todo)} episodes of this run failed; the first: {errors[0]}")
    return results


async def gather_cancelling(coros: Iterable[Awaitable[Any]]) -> None:
    """Run the episodes together; the first exception (a dead engine, Ctrl-C) cancels the others and propagates."""
    jobs = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*jobs)
    except BaseException:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise


def _indices(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.json")}


def rescore(episode: dict[str, Any], protocol: str, answer_format: str) -> dict[str, Any]:
    """The episode with em/sub_em/f1/answered under ``protocol``, from its final text.

    ``memrl`` keeps the workflow's own scores. Episodes without a final text (none in QA
    workflows) keep theirs too.
    """
    info = episode.get("info") or {}
    if protocol == "memrl" or "final_text" not in info or not info.get("answers"):
        return episode
    scores = score_protocol(info["final_text"], info["answers"], protocol, answer_format)
    return {**episode, "metrics": {**episode.get("metrics", {}), **scores}}


def aggregate(cfg: MemRLConfig, out: Path, docs: Sequence[int]) -> dict[str, Any]:
    """Summaries of what is on disk: finished episodes scored, failures (not retried yet) counted.

    Only the repeats asked for now are counted (a folder may hold more from an earlier run).
    """
    protocol, fmt, repeats = cfg.eval.protocol, cfg.workflow.answer_format, cfg.eval.repeats
    by_docs = {}
    for n in docs:
        folder = out / "episodes" / str(n)
        eps = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
        eps = [rescore(e, protocol, fmt) for e in eps if e.get("repeat", 0) < repeats]
        failed = {i for i in _indices(out / "failures" / str(n)) - _indices(folder)
                  if int(i.rpartition("@")[2] if "@" in i else 0) < repeats}
        by_docs[str(n)] = summarize(eps, failed=len(failed), repeats=repeats, skip_empty=protocol in PUBLISHED)
    results = {"model": cfg.model.path, "workflow": cfg.workflow.name, "engine": cfg.engine.kind,
               "protocol": protocol, "metric": METRIC_LABELS[protocol], "answer_format": fmt,
               "repeats": repeats, "sampling": {"temperature": cfg.sampling.temperature, "top_p": cfg.sampling.top_p},
               "by_docs": by_docs, "config": _fingerprint(cfg)}
    write_reports(results, out)
    return results
