"""Generating a step's episodes: ``algorithm.n`` per prompt, concurrently, with DAPO's dynamic sampling.

An episode that raises is counted and skipped (one bad sample must not stop
training); a dead engine stops the run, since every later episode would fail
too. Each episode is seeded from (run seed, step, round, sample, repeat), so a
resumed run samples what the uninterrupted run would have.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from memrl.config import MemRLConfig
from memrl.engines.base import Engine, EngineDeadError, SamplingParams
from memrl.rl.dapo import keep_groups, shape_overlong
from memrl.train.greedy_baseline import (BASELINE_METRIC, BASELINE_SCORE, baseline_keeps, greedy_baseline,
                                         with_baseline)
from memrl.train.guards import RolloutTally
from memrl.train.sampler import ResumableSampler
from memrl.train.signals import stop_requested_at
from memrl.types import Trajectory
from memrl.workflows.api import Workflow
from memrl.workflows.registry import as_workflow

T = TypeVar("T")

MAX_FAILURE_FILES = 200  # tracebacks kept per invocation: enough to debug, bounded if every episode fails


class EpisodeStopped(RuntimeError):
    """The run was asked to stop and this episode outlived ``trainer.stop_grace_s``."""


def own_failure(exc: BaseException) -> bool:
    """Whether an exception out of an episode is that episode's failure (recorded; the run goes on).

    Any ``Exception`` but a dead engine; also a workflow's own ``sys.exit()``, ``KeyboardInterrupt`` or
    ``CancelledError`` (user code run inside an episode must not end the run). Not a cancellation of the
    episode's task: that is Ctrl-C (``asyncio.run`` turns it into one) or the run stopping, and must
    propagate.
    """
    if isinstance(exc, EngineDeadError):
        return False
    if isinstance(exc, Exception):
        return True
    if isinstance(exc, (SystemExit, KeyboardInterrupt, asyncio.CancelledError)):
        task = asyncio.current_task()
        return task is not None and task.cancelling() == 0
    return False


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line: a multi-line message (a command's stderr) keeps its first and last lines,
    so the exit status and the last thing it printed are both in the warning."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(lines) > 1:
        text += f" ... {lines[-1]}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def until_stop_grace(awaitable: Awaitable[T], grace_s: float, what: str,
                           error: type[EpisodeStopped] = EpisodeStopped) -> T:
    """``awaitable``'s result; once the run is asked to stop it has ``grace_s`` seconds more, then ``error`` is
    raised (``what``: the episode, as the message names it). A timeout of the episode's own passes through."""
    try:
        async with asyncio.timeout(None) as scope:
            watch = asyncio.ensure_future(_cut_on_stop(scope, grace_s))
            try:
                return await awaitable
            finally:
                watch.cancel()
    except TimeoutError:
        if scope.expired():
            raise error(f"the run is stopping and {what} was still running {grace_s:g} s later "
                        "(trainer.stop_grace_s)") from None
        raise


async def _cut_on_stop(scope: asyncio.Timeout, grace_s: float) -> None:
    """End the episode under ``scope`` ``grace_s`` seconds after the run was asked to stop."""
    while (at := stop_requested_at()) is None:
        await asyncio.sleep(0.5)
    scope.reschedule(asyncio.get_running_loop().time() + max(0.0, at + grace_s - time.monotonic()))


def episode_seed(seed: int, step: int, round_: int, idx: int, k: int) -> int:
    """The sampling seed of repeat ``k`` of sample ``idx`` in generation round ``round_`` of ``step``."""
    return (seed * 1_000_003 + step * 10_007 + round_ * 101 + idx * 31 + k) % 2**31


def dynamic_sampling_keeps(cfg: MemRLConfig, trajs: Sequence[Trajectory]) -> list[bool]:
    """Dynamic sampling's verdict per episode (its group's), for the synchronous and the asynchronous rollout: the
    group mean weighted by conversations, as AReaL's filter averages over its model calls."""
    a = cfg.algorithm
    scores = [t.metrics.get("score", t.reward) if a.dynamic_sampling_metric == "score" else t.reward for t in trajs]
    groups = [t.group_id for t in trajs]
    if greedy_baseline(cfg) and a.dynamic_sampling_max_mean is None:  # ReMax: the baseline is one more member
        base = [t.metrics.get(BASELINE_SCORE, t.metrics[BASELINE_METRIC]) if a.dynamic_sampling_metric == "score"
                else t.metrics[BASELINE_METRIC] for t in trajs]
        with_b, ids = baseline_keeps(scores, groups, base)
        return keep_groups(with_b, ids, None, None, min_size=2)[: len(trajs)]
    return keep_groups(scores, groups, a.dynamic_sampling_max_mean, [len(t.conversations) for t in trajs],
                       min_size=min(a.n, 2))


def shaped(cfg: MemRLConfig, traj: Trajectory) -> Trajectory:
    """A training episode with DAPO's overlong penalty in its reward, when ``algorithm.overlong_buffer`` is set."""
    a = cfg.algorithm
    if a.overlong_buffer is not None and a.overlong_max_tokens is not None:
        shape_overlong(traj, a.overlong_max_tokens, a.overlong_buffer, a.overlong_penalty_factor)
    return traj


def sampling_params(cfg: MemRLConfig) -> SamplingParams:
    s = cfg.sampling
    return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)


class RolloutRunner:
    """Runs episodes of the training samples on an engine and keeps count of what failed."""

    def __init__(self, cfg: MemRLConfig, workflow: Any, samples: list[Any], sampler: ResumableSampler,
                 tokenizer: Any, warn: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.workflow = workflow
        self.samples = samples
        self.sampler = sampler
        self.tokenizer = tokenizer
        self.warn = warn
        self.engine: Engine | None = None
        self.tally = RolloutTally()
        self.failed_episodes = 0
        self.traceback_files = 0  # written by this invocation: a restart's failures are not hidden by the last one's
        self.pending: list[int] = []  # drawn by an earlier (asynchronous) run and not trained on: first in line
        self.producer: dict[str, Any] | None = None  # that run's producer state (AsyncRollout.producer_state)
        self.progress: Callable[[str], None] = _silent  # the tracker's phase line: what the rollout has done so far

    def draw(self, k: int) -> list[int]:
        """The next ``k`` sample indices: pending ones first, then the data order."""
        head, self.pending = self.pending[:k], self.pending[k:]
        return head + (self.sampler.take(k - len(head)) if k > len(head) else [])

    async def episode(self, idx: int, k: int, *, step: int, round_: int, engine: Engine | None = None,
                      group_id: str | None = None, occurrence: int = 0, greedy: bool = False) -> Trajectory | None:
        """Repeat ``k`` of sample ``idx``; None when the episode raised (counted and reported).

        ``occurrence``: the how-manyth draw of ``idx`` in this step (a step that crosses an epoch can draw a
        sample twice): each draw is a group of its own with seeds of its own, as verl gives every batch row its
        own uid (two draws made one group of 2n, and a seeded engine sampled each episode twice).
        """
        if occurrence:  # the greedy episode (remax) is repeat n of each draw: later draws start after it
            repeat = k + occurrence * (self.cfg.algorithm.n + int(greedy_baseline(self.cfg)))
        else:
            repeat = k
        seed = episode_seed(self.cfg.trainer.seed, step, round_, idx, repeat)
        if group_id is None:
            group_id = f"{step}:{round_}:{idx}" + (f"#{occurrence}" if occurrence else "")
        self.tally.attempted += 1
        try:
            return shaped(self.cfg, await until_stop_grace(
                self.workflow.episode(self.samples[idx], engine=engine or self.engine, tokenizer=self.tokenizer,
                                      sampling=sampling_params(self.cfg).with_(seed=seed, greedy=greedy),
                                      sample_id=str(idx),
                                      group_id=group_id),
                self.cfg.trainer.stop_grace_s, "this episode"))
        except BaseException as exc:
            if not own_failure(exc):
                raise  # a dead engine (every later episode would fail too) or this task's cancellation
            self.tally.stopped += int(isinstance(exc, EpisodeStopped))
            self.failed_episodes += 1
            self.tally.failed += 1
            self.tally.last_error = one_line(exc)
            # cut by the stop, not broken: its traceback says nothing (an online episode no agent took had none)
            where = "" if isinstance(exc, EpisodeStopped) else self._keep_traceback(step, idx, repeat, exc)
            if self.tally.first_time(self.tally.last_error):  # 96 identical lines say less than one and a count
                label = getattr(self.workflow, "label", type(self.workflow).__name__)
                self.warn(f"episode of sample {idx} failed (workflow {label}): {self.tally.last_error}{where}")
            return None

    def _keep_traceback(self, step: int, idx: int, k: int, exc: BaseException) -> str:
        """The whole traceback in RUN/failures/ (the first MAX_FAILURE_FILES of this invocation), for the warning to name.

        Counted per invocation, not by the folder: a restarted run that fails again (a fixed workflow that
        still breaks) must show its own tracebacks, not be silenced by the 200 the last attempt left there;
        a step redone after a restart overwrites the earlier attempt's file of the same name."""
        if self.traceback_files >= MAX_FAILURE_FILES:
            return ""
        folder = Path(self.cfg.trainer.output_dir) / "failures"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"step{step:06d}-sample{idx}-{k}.txt"
            path.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        except OSError:
            return ""
        self.traceback_files += 1
        return f" (traceback: {path})"

    async def episodes(self, indices: list[int], step: int, round_: int) -> list[Trajectory]:
        sem = asyncio.Semaphore(self.cfg.engine.concurrency)
        n = self.cfg.algorithm.n
        baseline = greedy_baseline(self.cfg)
        per = n + int(baseline)  # ReMax: the group's greedy episode comes last
        counter = CallCounter(self.engine, len(indices) * per, self.progress)

        async def one(idx: int, k: int, occurrence: int) -> Trajectory | None:
            async with sem:
                traj = await self.episode(idx, k, step=step, round_=round_, engine=counter, occurrence=occurrence,
                                          greedy=k == n)
            counter.episode_done()
            return traj

        results = await asyncio.gather(*(one(i, k, indices[:j].count(i)) for j, i in enumerate(indices)
                                         for k in range(per)))
        if not baseline:
            return [t for t in results if t is not None]
        return [t for j, i in enumerate(indices)
                for t in with_baseline(results[j * per:(j + 1) * per], self.baseline_failed(i))]

    def baseline_failed(self, idx: int) -> Callable[[str | None], None]:
        """What to do when a group's greedy episode fails: count the group (``baseline_failed``) and say so once a
        step; a non-finite reward is a failed episode too (a raised one was counted when it raised)."""
        def say(reason: str | None) -> None:
            self.tally.baseline_failed += 1
            if reason is not None:
                self.failed_episodes += 1
                self.tally.failed += 1
                self.tally.last_error = f"the greedy baseline episode of sample {idx}: {reason}"
            if "greedy baseline" not in self.tally.said:  # once a step, not counted as a repeated failure
                self.tally.said.add("greedy baseline")
                self.warn(f"the greedy baseline episode of sample {idx} failed{'' if reason is None else ': ' + reason}"
                          f"; its group is left out (adv_estimator={self.cfg.algorithm.adv_estimator})")
        return say

    def rollout(self, step: int) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(episodes to train on, every episode generated, stats).

        With dynamic sampling the first list holds only groups whose rewards vary.
        """
        cfg, a = self.cfg, self.cfg.algorithm
        want = cfg.trainer.prompts_per_step
        if not a.dynamic_sampling:
            trajs = asyncio.run(self.episodes(self.draw(want), step, 0))
            return trajs, trajs, {"dropped_groups": 0.0, "gen_rounds": 1.0, "rollout_episodes": float(len(trajs))}
        kept: list[Trajectory] = []
        stats = {"dropped_groups": 0.0, "gen_rounds": 0.0}
        all_trajs: list[Trajectory] = []
        round_ = 0
        while len(_groups(kept)) < want and (a.max_gen_batches == 0 or round_ < a.max_gen_batches):
            indices = self.draw(a.dynamic_sampling_prompts or want - len(_groups(kept)))
            trajs = asyncio.run(self.episodes(indices, step, round_))
            all_trajs += trajs
            stats["gen_rounds"] += 1
            keep = dynamic_sampling_keeps(cfg, trajs)
            stats["dropped_groups"] += len(_groups([t for t, k in zip(trajs, keep) if not k]))
            kept += [t for t, k in zip(trajs, keep) if k]
            round_ += 1
            if not trajs or stop_requested_at() is not None:  # every episode failed (the failure guard's), or a stop
                break
        first = _groups(kept)[:want]  # verl trims to train_batch_size in generation order
        kept = [t for t in kept if t.group_id in set(first)]
        stats["kept_groups"] = float(len(first))
        if 0 < len(first) < want:
            self.warn(short_step(step, len(first), want, f"in {round_} rounds "))
        stats["rollout_episodes"] = float(len(all_trajs))
        return kept, all_trajs, stats


def short_step(step: int, kept: int, want: int, how: str = "") -> str:
    """The warning of a dynamic-sampling step that trains fewer groups than it asked for (both rollout modes)."""
    return (f"step {step}: dynamic sampling kept {kept} of {want} groups {how}(algorithm.max_gen_batches); this "
            "step trains on those (verl raises here; max_gen_batches 0 generates until the batch is full)")


def _groups(trajs: Sequence[Trajectory]) -> list[str]:
    """The group ids of ``trajs``, in order of first appearance."""
    return list(dict.fromkeys(t.group_id for t in trajs))


def _silent(text: str) -> None:
    return None


class CallCounter:
    """The rollout's engine, counting finished model calls and generated tokens for the progress line.

    Episodes of a multi-conversation workflow run side by side and tend to finish together, so episodes
    alone would show nothing until the end of a long rollout; calls and tokens move all along. Every
    other attribute is the engine's own.
    """

    def __init__(self, engine: Any, episodes: int, report: Callable[[str], None], label: str = "rollout") -> None:
        self._engine, self._report, self._label = engine, report, label
        self.total, self.done, self.calls, self.tokens = episodes, 0, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def generate(self, prompt_ids: Any, params: SamplingParams) -> Any:
        result = await self._engine.generate(prompt_ids, params)
        self.calls += 1
        self.tokens += len(result.token_ids)
        self._say()
        return result

    def episode_done(self) -> None:
        self.done += 1
        self._say()

    def _say(self) -> None:
        self._report(f"{self._label}: {self.done}/{self.total} episodes, {self.calls:,} model calls, "
                     f"{self.tokens:,} tokens generated")


def metric_means(per_episode: list[dict[str, float]]) -> dict[str, float]:
    """The mean of every metric any episode reported, over the episodes that reported it (first-seen order)."""
    keys = dict.fromkeys(k for m in per_episode for k in m)
    return {k: statistics.fmean(float(m[k]) for m in per_episode if k in m) for k in keys}


def rollout_metrics(all_trajs: list[Trajectory], seconds: float) -> dict[str, float]:
    """Mean reward, the mean of every metric any episode reported (over the episodes reporting it), and
    generation throughput."""
    metrics: dict[str, float] = {}
    if all_trajs:
        metrics["reward"] = statistics.fmean(t.reward for t in all_trajs)
        for key, mean in metric_means([t.metrics for t in all_trajs]).items():
            metrics.setdefault(key, mean)
        gen_tokens = sum(t.num_generated_tokens for t in all_trajs)
        metrics["tokens_per_s"] = gen_tokens / max(seconds, 1e-9)
    return metrics


class EvalStopped(EpisodeStopped):
    """The run was asked to stop and an eval episode outlived ``trainer.stop_grace_s``: the eval is abandoned."""


EVAL_ROUND = -1  # the generation round eval episodes are seeded under (training rounds count from 0)


async def evaluate_samples(cfg: MemRLConfig, workflow: Any, samples: list[Any], engine: Engine | None,
                           tokenizer: Any, progress: Callable[[str], None] = _silent,
                           step: int = 0) -> dict[str, float]:
    """``eval/accuracy``: the mean reward in %, ``trainer.eval.n`` episodes per question (verl's val_kwargs.n),
    and ``eval/<name>``: the mean of each metric the episodes reported (``ep.metric``, turns, tokens);
    ``progress`` hears the episodes, calls and tokens done so far.

    Sampled evals (``trainer.eval.temperature`` > 0) seed each episode by (step, sample, repeat), as training
    episodes are seeded, so a resumed run measures what an uninterrupted one does. A stop gives running eval
    episodes ``trainer.stop_grace_s``, then raises :class:`EvalStopped`."""
    tc = cfg.trainer
    params = (SamplingParams(greedy=True) if tc.eval.temperature == 0
              else SamplingParams(temperature=tc.eval.temperature, top_p=tc.eval.top_p))
    if not isinstance(workflow, Workflow):
        workflow = as_workflow(workflow)
    counter = CallCounter(engine, len(samples) * tc.eval.n, progress, "eval")

    async def one(i: int, sample: Any, k: int) -> Trajectory:
        seeded = params if params.greedy else params.with_(seed=episode_seed(tc.seed, step, EVAL_ROUND, i, k))
        traj = await until_stop_grace(workflow.episode(sample, engine=counter if engine is not None else None,
                                                       tokenizer=tokenizer, sampling=seeded),
                                      tc.stop_grace_s, "an eval episode", EvalStopped)
        counter.episode_done()
        return traj

    trajs = await asyncio.gather(*(one(i, s, k) for i, s in enumerate(samples) for k in range(tc.eval.n)))
    means = {f"eval/{k}": v for k, v in metric_means([t.metrics for t in trajs]).items() if k != "accuracy"}
    return {"eval/accuracy": 100.0 * statistics.fmean(t.reward for t in trajs), **means}

