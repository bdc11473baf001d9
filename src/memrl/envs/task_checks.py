"""Tasks checked against the tools of their domain when the domain loads.

Why: a gold action is replayed to build the database a run must reach. One naming a tool the domain
lacks (a typo: ``add_evnt``) replays as an error that changes nothing, so the task then rewards the agent
that does nothing and fails the one that does the right thing, without a word. The same holds for an
argument the tool does not take. Such a task is refused here, in one line naming the file, the task's row
and the field, before any model loads. A task with neither a ticket nor a user scenario gives the agent
nothing to start from: refused here too, not after the first episodes fail.
"""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path
from typing import Any

from memrl.data.errors import DataError
from memrl.envs.tasks import Task
from memrl.envs.toolkit import Toolkit


def tool_parameters(toolkit: type[Toolkit] | None) -> dict[str, set[str] | None]:
    """``{tool name: the argument names it takes}`` of a toolkit class (None: it takes any, ``**kwargs``)."""
    found: dict[str, set[str] | None] = {}
    for name, params in _tool_signatures(toolkit).items():
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        found[name] = None if takes_any else {p.name for p in params}
    return found


def _tool_signatures(toolkit: type[Toolkit] | None) -> dict[str, list[inspect.Parameter]]:
    found: dict[str, list[inspect.Parameter]] = {}
    for name in dir(toolkit) if toolkit is not None else ():
        attr = getattr(toolkit, name)
        if callable(attr) and hasattr(attr, "__memrl_tool__"):
            found[name] = list(inspect.signature(attr).parameters.values())[1:]  # past self
    return found


def _required(toolkit: type[Toolkit] | None) -> dict[str, set[str]]:
    """``{tool name: the arguments it cannot go without}`` (no default, not ``*args`` / ``**kwargs``)."""
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {name: {p.name for p in params if p.default is inspect.Parameter.empty and p.kind in plain}
            for name, params in _tool_signatures(toolkit).items()}


def check_tasks(path: Path, tasks: list[Task], toolkit: type[Toolkit], user_toolkit: type[Toolkit] | None) -> None:
    """Refuse a task whose gold actions name a tool or an argument the domain lacks, or that has neither a ticket
    nor a user scenario (:class:`~memrl.data.errors.DataError`: file, row, field)."""
    tools = {**tool_parameters(user_toolkit), **tool_parameters(toolkit)}
    required = {**_required(user_toolkit), **_required(toolkit)}
    for row, task in enumerate(tasks, 1):
        if not task.ticket and task.user_scenario is None:
            raise DataError(path, row, "user_scenario", f"task {task.id} has neither a ticket nor a user "
                            "scenario: the agent (or the simulated user) would have nothing to start from")
        actions = task.evaluation_criteria.actions if task.evaluation_criteria else None
        for j, action in enumerate(actions or []):
            _check_action(path, row, j, task.id, action, tools)
            missing = sorted(required.get(action.name, set()) - set(action.arguments))
            if missing:
                raise DataError(path, row, f"evaluation_criteria.actions[{j}].arguments",
                                f"task {task.id}: tool {action.name!r} needs argument {missing[0]!r} (a gold action "
                                "that cannot run would leave the database unchanged)")


def _check_action(path: Path, row: int, j: int, task_id: str, action: Any, tools: dict[str, set[str] | None]) -> None:
    where = f"evaluation_criteria.actions[{j}]"
    if action.name not in tools:
        near = difflib.get_close_matches(action.name, list(tools), n=1, cutoff=0.75)
        hint = f"; did you mean {near[0]!r}?" if near else f" (its tools: {', '.join(sorted(tools)) or 'none'})"
        raise DataError(path, row, f"{where}.name", f"task {task_id}: the domain has no tool {action.name!r}{hint}")
    takes = tools[action.name]
    unknown = sorted(set(action.arguments) - takes) if takes is not None else []
    if unknown:
        raise DataError(path, row, f"{where}.arguments", f"task {task_id}: tool {action.name!r} takes no argument "
                        f"{unknown[0]!r} (it takes: {', '.join(sorted(takes)) or 'none'})")
