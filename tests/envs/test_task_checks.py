"""A domain's tasks are checked against its tools when it loads (a typo in a gold action inverts its reward)."""

from __future__ import annotations

import json
import shutil
from importlib import resources

import pytest

from memrl.data.errors import DataError
from memrl.envs.domain import LIBRARY, ToolDomain


def library_copy(tmp_path, edit):
    folder = tmp_path / "lib"
    shutil.copytree(resources.files("memrl.envs.domains") / "library", folder)
    tasks = json.loads((folder / "tasks.json").read_text())
    edit(tasks)
    (folder / "tasks.json").write_text(json.dumps(tasks))
    return ToolDomain("lib", LIBRARY.toolkit, folder=folder)


def first_action(tasks):
    row = next(i for i, t in enumerate(tasks) if (t.get("evaluation_criteria") or {}).get("actions"))
    return row, tasks[row]["evaluation_criteria"]["actions"][0]


def test_a_gold_action_naming_no_tool_of_the_domain_is_refused_with_its_row(tmp_path):
    row = []

    def typo(tasks):
        i, action = first_action(tasks)
        row.append(i + 1)
        action["name"] = action["name"][:-1]

    domain = library_copy(tmp_path, typo)
    with pytest.raises(DataError, match=rf"tasks.json:{row[0]}:evaluation_criteria.actions\[0\].name: task .* "
                                        r"has no tool '.*'; did you mean"):
        domain()


def test_an_argument_the_tool_does_not_take_is_refused(tmp_path):
    def extra(tasks):
        first_action(tasks)[1]["arguments"]["colour"] = "red"

    with pytest.raises(DataError, match=r"actions\[0\].arguments: task .* takes no argument 'colour' \(it takes: "):
        library_copy(tmp_path, extra)()


def test_a_task_with_neither_ticket_nor_user_scenario_is_refused(tmp_path):
    def bare(tasks):
        tasks[0].pop("ticket", None)
        tasks[0].pop("user_scenario", None)

    with pytest.raises(DataError, match=r"tasks.json:1:user_scenario: task .* has neither a ticket nor a user"):
        library_copy(tmp_path, bare)()


def test_the_bundled_and_tau2_domains_pass_the_check(tau2_dir):
    from memrl.envs.domain import load_domain

    assert load_domain("library").get_tasks(None)
    for name in ("mock", "retail", "airline", "telecom", "banking_knowledge"):
        assert load_domain(name, tau2_dir).get_tasks(None)


def test_a_gold_action_missing_a_required_argument_is_refused(tmp_path):
    def missing(tasks):
        action = first_action(tasks)[1]
        action["arguments"].pop(sorted(action["arguments"])[0])

    with pytest.raises(DataError, match=r"actions\[0\].arguments: task .* tool '.*' needs argument '.*' \(a gold "):
        library_copy(tmp_path, missing)()


def test_a_write_gold_action_that_fails_on_replay_is_said_once(capsys):
    """As τ²-bench logs it: the task's target database then lacks the action's effect."""
    import importlib

    from memrl.envs.messages import Message
    from memrl.envs.tasks import Action

    domain = LIBRARY()
    task = next(t for t in domain.tasks if t.evaluation_criteria and t.evaluation_criteria.actions)
    write = next(a for a in task.evaluation_criteria.actions
                 if getattr(getattr(domain.toolkit, a.name), "__memrl_tool__", "") != "read")
    bad = Action(**{**write.__dict__, "arguments": {**write.arguments, next(iter(write.arguments)): "no-such-id"}})
    task.evaluation_criteria.actions = [bad]
    ev = importlib.import_module("memrl.envs.evaluate")
    ev._WARNED.clear()
    for _ in range(2):
        ev.evaluate(domain, task, [Message("assistant", "done")])
    err = capsys.readouterr().err
    assert err.count(f"warning: library task {task.id}: gold action {bad.name}(") == 1
    assert "the target database lacks its effect" in err


def test_bare_tool_decorator_is_a_generic_tool_and_a_wrong_kind_is_refused():
    from memrl.envs.toolkit import Toolkit, tool

    class Kit(Toolkit):
        @tool
        def ping(self) -> str:
            """Answer pong."""
            return "pong"

    assert Kit.ping.__memrl_tool__ == "generic" and "ping" in [s["function"]["name"] for s in Kit({}).schemas()]
    with pytest.raises(ValueError, match="a tool's kind is 'read', 'write' or 'generic'"):
        tool("readonly")


def test_a_domain_without_splits_names_the_settings_to_change(tmp_path):
    domain = library_copy(tmp_path, lambda tasks: None)()
    domain.splits = {}  # a domain folder without split_tasks.json
    with pytest.raises(ValueError, match=r"has no split 'train'; splits: none \(no split_tasks.json\): pick one "
                                         r"with memrl eval --split NAME, or set env.train_split / env.eval_split "
                                         r"to one of them \(null: every task\)"):
        domain.get_tasks("train")
    assert len(domain.get_tasks(None)) == len(domain.tasks)


def no_keywords():
    """A domain factory written without data_dir= and tool_options=."""
    return LIBRARY()


def test_a_factory_without_the_keywords_is_one_line():
    from memrl.envs.domain import load_domain

    with pytest.raises(ValueError, match=r"domain 'tests.envs.test_task_checks:no_keywords': .*unexpected keyword "
                                         r"argument.*; a domain factory is called with data_dir= and tool_options="):
        load_domain("tests.envs.test_task_checks:no_keywords")
