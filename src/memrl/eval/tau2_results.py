"""A tool-agent eval folder as τ²-bench's own results file (``tau2_results.json``).

τ²-bench keeps a run as one JSON document (its ``Results`` model): ``info`` (trials, the agent and
user, the domain and its policy), ``tasks`` (the task records) and ``simulations`` (one per task
and trial: termination reason, reward info, and the messages with their tool calls and results).
memrl writes the finished episodes of an eval in that layout, so ``tau2 view --file`` browses
them and ``tau2 evaluate-trajs`` re-grades them with the benchmark's own evaluator (memrl's tool
results are the benchmark's, so the replay reproduces them).

The git commit is memrl's version; ``max_errors`` is ``workflow.options.max_errors``, or else τ²'s
default (10); ``max_steps`` is ``workflow.options.max_steps``, or else ``max_turns``. Costs are the
agent's and the user's chat tokens at LiteLLM's prices, as τ²-bench's (null where nothing can be
priced: a local model, no LiteLLM). An episode memrl cut at ``workflow.max_turns`` or at ``max_steps``
is τ²'s ``max_steps``; one cut at ``max_errors`` is ``too_many_errors``; one cut at ``timeout_s`` is
``timeout``; a trial that failed every try (``failures/``) is an ``infrastructure_error`` run without
messages, as τ²-bench records one; one cut at
``workflow.max_total_tokens`` is ``context_window_exceeded``; a transfer to a human is a ``user_stop``
(τ²'s user simulator ends the call at a transfer). In solo mode the ticket is not a message (τ² puts
it in the agent's prompt), and the agent and user are
named ``llm_agent_solo`` / ``dummy_user``, which is how τ²-bench recognises a solo run.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

TERMINATION = {"agent_stop": "agent_stop", "user_stop": "user_stop", "transfer": "user_stop",
               "max_turns": "max_steps", "max_steps": "max_steps", "too_many_errors": "too_many_errors",
               "timeout": "timeout", "user_error": "user_error", "max_tokens": "context_window_exceeded"}
TAU2_MAX_ERRORS = 10  # τ²-bench's default, written when workflow.options.max_errors is not set


def tau2_message(m: dict[str, Any], turn: int, stamp: str) -> dict[str, Any]:
    """One memrl message as τ²-bench's message model (tool results carry their call's id)."""
    if m["role"] == "tool":
        return {"id": m.get("call_id") or "", "role": "tool", "content": m.get("content"),
                "requestor": m.get("requestor") or "assistant", "error": bool(m.get("error")),
                "turn_idx": turn, "timestamp": stamp}
    calls = [{"id": c.get("id") or "", "name": c["name"], "arguments": c.get("arguments") or {},
              "requestor": c.get("requestor") or m["role"]} for c in m.get("tool_calls") or []]
    return {"role": m["role"], "content": m.get("content"), "tool_calls": calls or None, "turn_idx": turn,
            "timestamp": stamp}


def _with_call_ids(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calls as τ² pairs them: each call carries the id of the tool result that answers it (memrl's parsed
    calls have none; their results name the id the environment gave them), results in call order."""
    out = [dict(m) for m in msgs]
    for i, m in enumerate(out):
        calls = m.get("tool_calls") or []
        answers = out[i + 1:i + 1 + len(calls)]
        m["tool_calls"] = [dict(c, id=c.get("id") or (a.get("call_id") or "" if a["role"] == "tool" else ""))
                           for c, a in zip(calls, answers)] + [dict(c) for c in calls[len(answers):]]
    return out


def tau2_simulation(record: dict[str, Any], task: Any, stamp: str, solo: bool,
                    models: dict[str, str | None] | None = None) -> dict[str, Any]:
    """A memrl episode record (``episodes/<task>/<trial>.json``) as a τ²-bench ``SimulationRun``."""
    info = record.get("info") or {}
    msgs = _with_call_ids([m for m in info.get("messages") or []
                           if not (solo and m["role"] == "user" and not m.get("tool_calls"))])
    breakdown = info.get("reward_breakdown") or {}
    reward_info: dict[str, Any] = {
        "reward": float(record["reward"]), "reward_breakdown": breakdown or None,
        "reward_basis": list(task.evaluation_criteria.reward_basis) if task.evaluation_criteria else None,
        "info": {"note": info["note"]} if info.get("note") else None}
    if "DB" in breakdown:
        reward_info["db_check"] = {"db_match": breakdown["DB"] == 1.0, "db_reward": float(breakdown["DB"])}
    seconds = float(record.get("seconds") or 0.0)
    return {"id": f"{task.id}/{record['trial']}", "task_id": task.id, "timestamp": stamp, "start_time": stamp,
            "end_time": stamp, "duration": seconds,
            "termination_reason": TERMINATION.get(info.get("ending"), "agent_error"),
            **_costs(record, models or {}), "reward_info": reward_info,
            "messages": [tau2_message(m, i, stamp) for i, m in enumerate(msgs)],
            "trial": int(record["trial"]), "seed": record.get("seed")}


def _costs(record: dict[str, Any], models: dict[str, str | None]) -> dict[str, float | None]:
    """τ²-bench's ``agent_cost`` and ``user_cost`` of one simulation: its chat tokens at LiteLLM's prices; 0 for a
    side that sent no chat request in an episode that sent some (τ²-bench's solo run: its user costs 0), null
    when nothing can be priced."""
    from memrl.engines.usage import usage_cost, usage_totals

    usage = usage_totals([record.get("metrics") or {}])
    costs = {role: usage_cost(models.get(role), usage.get(role)) for role in ("agent", "user")}
    if any(c is not None for c in costs.values()):
        costs = {role: 0.0 if role not in usage else c for role, c in costs.items()}
    return {f"{role}_cost": c for role, c in costs.items()}


def tau2_failure(record: dict[str, Any], stamp: str) -> dict[str, Any]:
    """A trial that failed every try (``failures/<task>/<trial>.json``) as τ²-bench records one: an
    ``infrastructure_error`` run with no messages, which its metrics leave out."""
    error = str(record.get("error") or "")
    kind, _, _ = error.partition(":")
    return {"id": f"{record['task_id']}/{record['trial']}", "task_id": record["task_id"], "timestamp": stamp,
            "start_time": stamp, "end_time": stamp, "duration": 0.0, "termination_reason": "infrastructure_error",
            "agent_cost": None, "user_cost": None, "reward_info": None, "messages": [],
            "trial": int(record["trial"]), "seed": record.get("seed"),
            "info": {"error": error, "error_type": kind.strip() if kind.strip().isidentifier() else "Exception",
                     "failed_after_attempts": int(record.get("attempts") or 1)}}


def tau2_results(cfg: Any, records: list[dict[str, Any]], tasks: list[Any], policy: str, trials: int,
                 stamps: list[str], failures: list[tuple[dict[str, Any], str]] = ()) -> dict[str, Any]:
    """The τ²-bench ``Results`` document of an eval's finished episodes (and its failed trials, ``failures``:
    (record, stamp) pairs)."""
    from memrl import __version__
    from memrl.engines.usage import role_models

    e = cfg.env
    solo = bool(e.solo)
    by_id = {t.id: t for t in tasks}
    agent = {"implementation": "llm_agent_solo" if solo else "llm_agent", "llm": cfg.model.path,
             "llm_args": {"temperature": cfg.sampling.temperature, "top_p": cfg.sampling.top_p}}
    user = ({"implementation": "dummy_user"} if solo else
            {"implementation": "user_simulator", "llm": e.user.served_model or e.user.model,
             "llm_args": {"temperature": e.user.temperature, "max_tokens": e.user.max_tokens}})
    return {
        "timestamp": max(stamps) if stamps else dt.datetime.now().isoformat(),
        "info": {"git_commit": f"memrl {__version__}", "num_trials": trials,
                 "max_steps": cfg.workflow.max_steps or cfg.workflow.max_turns,
                 "max_errors": cfg.workflow.max_errors or TAU2_MAX_ERRORS, "user_info": user, "agent_info": agent,
                 "environment_info": {"domain_name": e.domain, "policy": policy}, "seed": cfg.sampling.seed},
        "tasks": [t.model_dump(mode="json", exclude_unset=True) for t in tasks],
        "simulations": [tau2_simulation(r, by_id[r["task_id"]], s, solo, role_models(cfg))
                        for r, s in zip(records, stamps)] + [tau2_failure(r, s) for r, s in failures],
    }


def write_tau2_results(cfg: Any, out: Path, task_ids: list[str], trials: int) -> Path:
    """Write ``out/tau2_results.json`` from the finished episodes under ``out/episodes``."""
    from memrl.io.atomic import atomic_write
    from memrl.envs.domain import load_domain
    from memrl.eval.records import task_folder

    domain = load_domain(cfg.env.domain, cfg.env.data_dir, tool_options=cfg.env.tool_options)
    tasks = {t.id: t for t in domain.get_tasks(cfg.env.eval_split)}
    records, stamps, failures = [], [], []
    for task_id in task_ids:
        for t in range(trials):
            path = out / "episodes" / task_folder(task_id) / f"{t}.json"
            failed = out / "failures" / task_folder(task_id) / f"{t}.json"
            if path.is_file():
                records.append(json.loads(path.read_text(encoding="utf-8")))
                stamps.append(_stamp(path))
            elif failed.is_file():
                failures.append(({"task_id": task_id, "trial": t, **_read_failure(failed)}, _stamp(failed)))
    policy = domain.new_env(solo=cfg.env.solo).policy
    doc = tau2_results(cfg, records, [tasks[i] for i in task_ids], policy, trials, stamps, failures)
    dest = out / "tau2_results.json"
    with atomic_write(dest) as fh:
        json.dump(doc, fh, indent=1, ensure_ascii=False, default=str)
    return dest


def _stamp(path: Path) -> str:
    return dt.datetime.fromtimestamp(path.stat().st_mtime).isoformat()


def _read_failure(path: Path) -> dict[str, Any]:
    """A failure record's fields (an unreadable one still marks its trial failed)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: data[k] for k in ("error", "seed", "attempts") if isinstance(data, dict) and k in data}
