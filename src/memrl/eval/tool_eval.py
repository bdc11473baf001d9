"""``memrl eval --workflow tool_agent``: K trials of every task of a split, pass^k, readable transcripts.

Each (task, trial) is one episode of the ``tool_agent`` workflow with its own seed. Finished
trials are saved under ``episodes/`` (summary), ``transcripts/`` (the conversation, readable) and
``rollouts/`` (tokens and log-probs, the record training writes: see :mod:`memrl.eval.records`),
and skipped by the next run; ``tau2_results.json`` holds them in τ²-bench's own results layout
(:mod:`memrl.eval.tau2_results`); a trial that failed (an HTTP
error, a crash; first tried again ``eval.max_retries`` times) is written to ``failures/``, not scored,
and tried again next time. pass^k is computed as τ²-bench's metrics compute it, failed trials left out
(see :func:`aggregate_tool_eval` and :mod:`memrl.eval.passk`).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from memrl.config.schema import MemRLConfig
from memrl.io.atomic import atomic_write
from memrl.engines.base import Engine, EngineDeadError
from memrl.engines.usage import role_models, usage_cost, usage_line, usage_totals
from memrl.envs.messages import InvalidMessageError
from memrl.eval.passk import is_success, pass_hat_ks
from memrl.eval.records import ROLLOUTS, finished_episode, save_eval_rollout, task_folder
from memrl.eval.runner import AllEpisodesFailedError, ending_counts, endings_note, gather_cancelling, sampling_params
from memrl.workflows import build_workflow, samples_of

TOOL_EVAL_OUTPUTS = ("eval_config.yaml", "episodes", "failures", "transcripts", ROLLOUTS, "results.json",
                     "results.md", "tau2_results.json")


def render_conversation(record: dict[str, Any]) -> str:
    """An episode as the conversation it was: user, agent, tool calls and their results."""
    info = record.get("info") or {}
    breakdown = info.get("reward_breakdown") or {}
    parts = ", ".join(f"{k} {v:g}" for k, v in breakdown.items() if isinstance(v, (int, float)))
    lines = [f"# task {record['task_id']} · trial {record['trial']}",
             f"reward: {record['reward']:g}" + (f" ({parts})" if parts else "")
             + f" · ending {info.get('ending')} · turns {record.get('metrics', {}).get('turns', 0):g}"]
    if info.get("note"):
        lines.append(f"note: {info['note']}")
    lines.append("")
    for m in info.get("messages") or []:
        role = m.get("role")
        who = "agent" if role == "assistant" else role
        if m.get("content"):
            lines.append(f"[{who}] {m['content']}")
        for call in m.get("tool_calls") or []:
            args = json.dumps(call.get("arguments") or {}, ensure_ascii=False, sort_keys=True)
            lines.append(f"[{who} -> tool] {call.get('name')}({args})")
        if role == "tool" and m.get("error"):
            lines[-1] += "   (error)"
    return "\n".join(lines) + "\n"


def _save(path: Path, payload: dict[str, Any]) -> None:
    with atomic_write(path) as fh:
        json.dump(payload, fh, indent=1, default=str)


async def run_tool_eval(cfg: MemRLConfig, engine: Engine, tokenizer: Any, out: Path, trials: int, *,
                        on_start: Callable[[int, int], None] | None = None,
                        on_episode: Callable[[], None] | None = None, rollouts: bool = True) -> dict[str, Any]:
    """Run ``trials`` episodes of every task of ``env.eval_split``; write and return the results.

    ``rollouts=False`` leaves out the rollout records (summaries and transcripts are kept).
    """
    if trials < 1:
        raise ValueError(f"--trials must be >= 1, got {trials}")
    workflow = build_workflow(cfg)  # the user simulator and judge, built once for every trial
    samples = samples_of(workflow, "eval")
    if not samples:
        raise ValueError(f"no tasks in split {cfg.env.eval_split!r} of domain {cfg.env.domain!r}")
    base = sampling_params(cfg)
    seeds = trial_seeds(base.seed if base.seed is not None else cfg.trainer.seed, trials,
                        getattr(cfg.workflow, "seeds", "memrl"))
    todo = _unfinished(samples, trials, out)
    if on_start:
        on_start(len(samples) * trials, len(samples) * trials - len(todo))
    sem = asyncio.Semaphore(cfg.engine.concurrency)
    failed = 0
    errors: list[BaseException] = []

    async def one(sample: Any, task_id: str, t: int, dest: Path) -> None:
        nonlocal failed
        seed = seeds[t]
        folder = task_folder(task_id)
        async with sem:
            t0 = time.perf_counter()
            traj, exc, tries = await _tried(lambda: workflow.episode(
                sample, engine=engine, tokenizer=tokenizer, sampling=base.with_(seed=seed), sample_id=task_id,
                group_id=task_id), 1 + cfg.eval.max_retries, cfg.eval.retry_delay_s)
            if traj is None:  # recorded, not scored, retried by the next run
                failed += 1
                errors.append(exc)
                error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                _save(out / "failures" / folder / f"{t}.json", {"task_id": task_id, "trial": t, "seed": seed,
                      "error": error, "attempts": tries, "seconds": time.perf_counter() - t0})
                return
        record = {"task_id": task_id, "trial": t, "seed": seed, "reward": traj.reward,
                  "success": is_success(traj.reward), "metrics": traj.metrics, "info": traj.info, "seconds": round(time.perf_counter() - t0, 3)}
        if rollouts:  # before the episode file, which marks the trial done
            save_eval_rollout(out, f"{folder}/{t}", traj, tokenizer, {"task_id": task_id, "trial": t})
        _save(dest, record)
        (out / "failures" / folder / f"{t}.json").unlink(missing_ok=True)
        transcript = out / "transcripts" / folder / f"{t}.txt"
        with atomic_write(transcript) as fh:
            fh.write(render_conversation(record))
        if on_episode:
            on_episode()

    await gather_cancelling(one(*job) for job in todo)  # a dead engine stops every trial at once
    results = _write_results(cfg, out, [s.task.id for s in samples], trials)
    if todo and failed == len(todo) and not all(isinstance(e, InvalidMessageError) for e in errors):  # the setup
        first = "".join(traceback.format_exception_only(type(errors[0]), errors[0])).strip()
        raise AllEpisodesFailedError(f"all {failed} trials failed (see {out}/failures/); the first: {first[:500]}")
    return results


async def _tried(episode: Callable[[], Awaitable[Any]], tries: int,
                 delay_s: float) -> tuple[Any, Exception | None, int]:
    """(the trajectory or None, the last error, tries made): an episode run up to ``tries`` times while it raises,
    as τ²-bench's ``run_with_retry`` runs a simulation (the same seed each time; a dead engine stops at once)."""
    error: Exception | None = None
    for attempt in range(tries):
        if attempt:
            await asyncio.sleep(delay_s)
        try:
            return await episode(), None, attempt + 1
        except EngineDeadError:
            raise
        except Exception as exc:
            error = exc
    return None, error, tries


def trial_seeds(seed: int, trials: int, scheme: str = "memrl") -> list[int]:
    """Each trial's episode seed. memrl's: ``seed + 7919 t``. ``tau2``: τ²-bench's batch runner's, the
    first ``trials`` draws of ``randint(0, 1000000)`` after ``random.seed(seed)``, so a run seeded as
    τ²-bench's (its default is 300) sends the very seeds its trials send."""
    if scheme == "tau2":
        rng = random.Random(seed)
        return [rng.randint(0, 1_000_000) for _ in range(trials)]
    return [seed + 7919 * t for t in range(trials)]


def _unfinished(samples: list[Any], trials: int, out: Path) -> list[tuple[Any, str, int, Path]]:
    """(sample, task id, trial, episode file) of every trial with no episode file yet."""
    todo = []
    for sample in samples:
        task_id = sample.task.id
        for t in range(trials):
            dest = out / "episodes" / task_folder(task_id) / f"{t}.json"
            if finished_episode(dest) is None:
                todo.append((sample, task_id, t, dest))
    return todo


def _write_results(cfg: MemRLConfig, out: Path, task_ids: list[str], trials: int) -> dict[str, Any]:
    """results.json, results.md and τ²-bench's own results file, from every episode on disk."""
    results = aggregate_tool_eval(cfg, out, task_ids, trials)
    _save(out / "results.json", results)
    with atomic_write(out / "results.md") as fh:
        fh.write(tool_results_markdown(results))
    from memrl.eval.tau2_results import write_tau2_results

    write_tau2_results(cfg, out, task_ids, trials)  # what `tau2 view` / `tau2 evaluate-trajs` read
    return results


def _is_subset(cfg: MemRLConfig, evaluated: int) -> bool:
    """Whether env.task_ids / env.num_tasks left some of the split's tasks out (a --num-tasks at or above the
    split's size leaves none out)."""
    if not (cfg.env.task_ids or cfg.env.num_tasks):
        return False
    from memrl.envs.domain import load_domain

    domain = load_domain(cfg.env.domain, cfg.env.data_dir, tool_options=cfg.env.tool_options, prompts=cfg.env.prompts)
    return evaluated < len(domain.get_tasks(cfg.env.eval_split))


def aggregate_tool_eval(cfg: MemRLConfig, out: Path, task_ids: list[str], trials: int) -> dict[str, Any]:
    """Per-task outcomes, and pass^k as τ²-bench's metrics compute it: over every task with a finished trial,
    for k up to the fewest finished trials of any of them (failed trials are left out, as its
    ``infrastructure_error`` runs are)."""
    per_task: dict[str, Any] = {}
    outcomes: dict[str, list[bool]] = {}
    rewards: list[float] = []
    records: list[dict[str, Any]] = []
    failed = 0
    for task_id in task_ids:
        folder = task_folder(task_id)
        recs = []
        for t in range(trials):
            path = out / "episodes" / folder / f"{t}.json"
            if path.is_file():
                recs.append(json.loads(path.read_text(encoding="utf-8")))
            elif (out / "failures" / folder / f"{t}.json").is_file():
                failed += 1
        rs = [float(r["reward"]) for r in recs]
        rewards += rs
        records += recs
        per_task[task_id] = {"trials": len(recs), "successes": sum(map(is_success, rs)), "rewards": rs,
                             "nl_unchecked": sum(int((r.get("info") or {}).get("nl_unchecked", 0)) for r in recs)}
        if recs:
            outcomes[task_id] = [is_success(r) for r in rs]
    return {
        "domain": cfg.env.domain, "split": cfg.env.eval_split, "model": cfg.model.path, "trials": trials,
        "solo": cfg.env.solo, "tasks": len(task_ids), "failed_trials": failed,
        "subset": _is_subset(cfg, len(task_ids)),
        "complete_tasks": sum(t["trials"] == trials for t in per_task.values()),
        "avg_reward": statistics.fmean(rewards) if rewards else None,
        "pass_hat_k": {str(k): v for k, v in pass_hat_ks(outcomes).items()},
        "nl_assertions_unchecked": sum(t["nl_unchecked"] for t in per_task.values()),
        "endings": ending_counts(records), "max_total_tokens": cfg.workflow.max_total_tokens,
        **_chat_spend(cfg, records),
        "per_task": per_task,
    }


def _chat_spend(cfg: MemRLConfig, records: list[dict[str, Any]]) -> dict[str, Any]:
    """``chat_usage`` (per role: requests and tokens over the finished trials) and ``chat_cost_usd`` (per
    role: what they cost at LiteLLM's prices, None where it has none)."""
    usage = usage_totals([r.get("metrics") or {} for r in records])
    models = role_models(cfg)
    return {"chat_usage": usage, "chat_cost_usd": {role: usage_cost(models[role], u) for role, u in usage.items()}}


def tool_results_markdown(results: dict[str, Any]) -> str:
    ks = results["pass_hat_k"]
    head = (f"**tool_agent** on `{results['model']}` · domain `{results['domain']}` split `{results['split']}` · "
            f"{results['trials']} trial(s) per task · {'solo' if results['solo'] else 'with user simulator'}\n\n")
    avg = results["avg_reward"]
    lines = [head, "| tasks | complete | failed trials | avg reward | " + " | ".join(f"pass^{k}" for k in ks) + " |",
             "|---:|---:|---:|---:|" + "---:|" * len(ks),
             f"| {results['tasks']} | {results['complete_tasks']} | {results['failed_trials']} | "
             f"{'-' if avg is None else f'{avg:.3f}'} | " + " | ".join(f"{v:.3f}" for v in ks.values()) + " |", ""]
    lines += [line + "\n" for line in endings_note(results.get("endings") or {}, results.get("max_total_tokens", 0))]
    if results.get("chat_usage"):
        lines.append(f"Chat requests of the finished trials: {usage_line(results['chat_usage'])}."
                     + _cost_note(results.get("chat_cost_usd") or {}) + "\n")
    if results["nl_assertions_unchecked"]:
        lines.append(f"{results['nl_assertions_unchecked']} natural-language assertion(s) were not judged "
                     "(no judge configured): rewards are higher than τ²-bench would give.\n")
    lines += ["| task | trials | successes | rewards |", "|---|---:|---:|---|"]
    for task_id, t in results["per_task"].items():
        lines.append(f"| {task_id} | {t['trials']} | {t['successes']} | {' '.join(f'{r:g}' for r in t['rewards'])} |")
    return "\n".join(lines) + "\n"


def _cost_note(costs: dict[str, float | None]) -> str:
    """`` Cost at LiteLLM's prices: $1.2345 (agent $1.2000, user $0.0345; judge not priced).``, or nothing."""
    priced = {r: c for r, c in costs.items() if c is not None}
    if not priced:
        return ""
    parts = ", ".join(f"{r} ${c:.4f}" for r, c in priced.items())
    unpriced = [r for r, c in costs.items() if c is None]
    missing = f"; {', '.join(unpriced)} not priced" if unpriced else ""
    return f" Cost at LiteLLM's prices: ${sum(priced.values()):.4f} ({parts}{missing})."
