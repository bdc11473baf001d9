"""For tool-agent episodes: the task's gold actions and each check the τ² grader made, for the viewer.

An episode record keeps the grader's per-component scores (``reward_breakdown``) but not which
gold action was missed or which required phrase never came. The viewer grades the recorded
message log again with :func:`memrl.envs.evaluate.evaluate` against the task of the folder's
saved ``env`` settings: gold actions (matched or not), required information (communicated or
not), environment assertions, the database comparison. NL assertions need a judge model and are
listed unjudged. Only built-in and installed domains are loaded: a domain named by an import
path in a folder's config would run that folder's code just by viewing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_DOMAINS: dict[str, Any] = {}  # by env settings: loaded once per process
_FOLDERS: dict[tuple[str, int], Grader | None] = {}


class Grader:
    """The domain and tasks of one folder's ``env`` settings."""

    def __init__(self, env: dict[str, Any]) -> None:
        from memrl.envs.domain import load_domain

        self.env = env
        key = repr(sorted((k, str(v)) for k, v in env.items()))
        if key not in _DOMAINS:
            _DOMAINS[key] = load_domain(str(env.get("domain")), env.get("data_dir"),
                                        tool_options=env.get("tool_options") or {})
        self.domain = _DOMAINS[key]
        self.tasks: dict[str, Any] = {}
        for split in (None, env.get("eval_split"), env.get("train_split")):
            try:
                self.tasks.update({t.id: t for t in self.domain.get_tasks(split)})
            except ValueError:
                continue

    def check(self, info: dict[str, Any]) -> dict[str, Any] | None:
        """What the grader checked for the episode whose ``info`` (task_id, ending, messages) is given."""
        from memrl.envs.evaluate import evaluate
        from memrl.envs.messages import Message

        task = self.tasks.get(str(info.get("task_id")))
        crit = task.evaluation_criteria if task is not None else None
        if crit is None:
            return None
        messages = [Message.from_dict(m) for m in info.get("messages") or []]
        grade = evaluate(self.domain, task, messages, ending=str(info.get("ending", "agent_stop")),
                         solo=bool(self.env.get("solo", True)), partial=bool(self.env.get("partial_credit")))
        args = lambda a: ", ".join(f"{k}={v!r}" for k, v in a.arguments.items())  # noqa: E731
        return {
            "basis": list(crit.reward_basis), "db_match": grade.db_match, "note": grade.note,
            "actions": [{"name": a.name, "arguments": a.arguments, "requestor": a.requestor,
                         "compare_args": a.compare_args, "matched": ok}
                        for a, ok in _paired(crit.actions, grade.action_checks)],
            "communicate": [{"text": s, "found": ok} for s, ok in _paired(crit.communicate_info,
                                                                           grade.communicate_checks)],
            "env_assertions": [{"call": f"{a.func_name}({args(a)})", "expected": a.assert_value, "ok": ok}
                               for a, ok in _paired(crit.env_assertions, grade.env_assertion_checks)],
            "nl_assertions": [{"text": s, "ok": ok} for s, ok in _paired(crit.nl_assertions, grade.nl_checks)],
        }


def _paired(items: list[Any] | None, checks: list[bool]) -> list[tuple[Any, bool | None]]:
    """Each gold item with its check; None where the grader did not get to it (an early ending, no judge)."""
    items = list(items or [])
    return list(zip(items, [*checks, *[None] * (len(items) - len(checks))]))


def folder_grader(folder: Path, warn: Any) -> Grader | None:
    """The grader of a run's or eval's tool-agent settings, or None (not a tool-agent folder, or unloadable).

    Found once per folder and settings file version: the server asks for every opened episode.
    """
    path = next((Path(folder) / n for n in ("eval_config.yaml", "config.yaml") if (Path(folder) / n).is_file()), None)
    if path is None:
        return None
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    if key not in _FOLDERS:
        _FOLDERS[key] = _grader_of(path, warn)
    return _FOLDERS[key]


def _graded_by_env(workflow: dict[str, Any]) -> bool:
    """Whether the run's workflow is a built-in one whose episodes the env section grades (a plug-in's code is
    never imported by the viewer)."""
    from memrl.plugins import WORKFLOWS

    name = str(workflow.get("name", ""))
    if name not in WORKFLOWS.names:
        return False
    from memrl.workflows.registry import registered, workflow_class

    try:  # the class says it: building the workflow would validate options the folder need not hold
        return bool(workflow_class(registered(name)).uses_env)
    except (ValueError, ImportError):
        return False


def _without_named_code(env: dict[str, Any], warn: Any) -> dict[str, Any]:
    """The env with only the tool options that are plain switches and sizes: a text option can name code to
    import (an embedder ``module:function``), a URL and an environment variable to send as its key (an
    embedding endpoint) or a shell variant; grading a saved episode needs the tasks and the database, none of
    those, and viewing a folder never runs, calls or sends what the folder names."""
    opts = env.get("tool_options")
    if not isinstance(opts, dict):
        return {**env, "tool_options": {}}
    kept = {k: v for k, v in opts.items() if isinstance(v, (bool, int, float))}
    dropped = sorted(set(opts) - set(kept))
    if dropped:
        warn(f"env.tool_options {', '.join(map(str, dropped))} not applied: the viewer grades with the domain's "
             "default tools (it never imports, calls or sends what a folder's config names)")
    return {**env, "tool_options": kept}


def _grader_of(path: Path, warn: Any) -> Grader | None:
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(cfg, dict):
        return None
    env, workflow = cfg.get("env") or {}, cfg.get("workflow") or {}
    if not isinstance(env, dict) or not isinstance(workflow, dict) or not _graded_by_env(workflow):
        return None
    if ":" in str(env.get("domain", "")):
        warn(f"domain {env['domain']!r} is an import path: gold actions and grader checks not shown "
             "(viewing a folder never runs its code)")
        return None
    env = _without_named_code(env, warn)
    try:
        return Grader(env)
    except Exception as exc:  # a missing data_dir, a moved tau2 clone: the page still shows the episodes
        warn(f"domain {env.get('domain')!r} not loaded ({exc}); gold actions and grader checks not shown")
        return None


def grader_view(grader: Grader | None, record: dict[str, Any], warn: Any) -> dict[str, Any] | None:
    """:meth:`Grader.check` of a record, None where there is nothing to show or grading fails."""
    info = record.get("info")
    if grader is None or not isinstance(info, dict) or not info.get("messages"):
        return None
    try:
        return grader.check(info)
    except Exception as exc:  # a log the domain cannot replay: the rest of the episode is still worth a look
        warn(f"task {info.get('task_id')!r}: grader checks not shown ({type(exc).__name__}: {exc})")
        return None
