"""τ²-bench grading rules on small hand-made tasks (no τ² files needed)."""

from __future__ import annotations

import json

import pytest

from memrl.data.errors import DataError
from memrl.envs.domain import load_domain
from memrl.envs.evaluate import communicated, evaluate, run_calls
from memrl.envs.messages import Message, ToolCall
from memrl.envs.tasks import Action, Task, read_tasks


@pytest.fixture(scope="module")
def lib():
    return load_domain("library")


def task(**crit) -> Task:
    return Task.model_validate({"id": "t", "ticket": "x", "evaluation_criteria": crit})


def test_default_reward_basis_is_db_and_communicate():
    assert task().evaluation_criteria.reward_basis == ["DB", "COMMUNICATE"]


def test_action_matching_follows_compare_args():
    a = Action(name="f", arguments={"x": 1, "y": 2})
    assert a.matches("f", {"x": 1, "y": 2})
    assert not a.matches("g", {"x": 1, "y": 2})
    assert not a.matches("f", {"x": 1, "y": 3})
    assert not a.matches("f", {"x": 1, "y": 2, "z": 0})  # keys come from the call
    assert a.matches("f", {"x": 1})  # ...so a call with fewer keys is compared on those only (as tau2-bench)
    assert Action(name="f", arguments={"x": 1}, compare_args=[]).matches("f", {"anything": 5})
    assert Action(name="f", arguments={"x": 1, "y": 2}, compare_args=["x"]).matches("f", {"x": 1, "y": 9})


def test_communicate_is_case_insensitive_substring_without_commas():
    msgs = [Message("user", "I owe 1,234.50"), Message("assistant", "You owe 1,234.50 dollars.")]
    assert communicated("1234.50", msgs)
    assert communicated("YOU OWE", msgs)
    assert not communicated("999", msgs)
    assert not communicated("1234.50", msgs[:1])  # only the agent's messages count


def test_reward_is_product_of_basis_components_or_mean_with_partial_credit(lib):
    t = task(actions=[{"name": "get_member_details", "arguments": {"member_id": "M001"}},
                      {"name": "search_books", "arguments": {"query": "glass"}}],
             communicate_info=["fine"], reward_basis=["DB", "ACTION", "COMMUNICATE"])
    one_action = run_calls(lib, t, [ToolCall("get_member_details", {"member_id": "M001"})])
    one_action.append(Message("assistant", "no fine owed"))
    info = evaluate(lib, t, one_action)
    assert info.db_match is True and info.action_checks == [True, False] and info.communicate_checks == [True]
    assert info.breakdown == {"DB": 1.0, "ACTION": 0.0, "COMMUNICATE": 1.0} and info.reward == 0.0
    part = evaluate(lib, t, one_action, partial=True)
    assert part.breakdown == {"DB": 1.0, "ACTION": 0.5, "COMMUNICATE": 1.0}
    assert part.reward == pytest.approx(2.5 / 3)


def test_no_criteria_scores_one_and_nl_assertions_without_judge_are_left_out(lib):
    assert evaluate(lib, Task(id="x", ticket="t"), []).reward == 1.0
    t = task(actions=[], nl_assertions=["agent was polite"], reward_basis=["DB", "NL_ASSERTION"])
    info = evaluate(lib, t, [Message("assistant", "hi")])
    assert info.reward == 1.0 and info.nl_unchecked == 1
    judged = evaluate(lib, t, [Message("assistant", "hi")], nl_judge=lambda asserts, msgs: [False] * len(asserts))
    assert judged.reward == 0.0


def test_read_tasks_points_at_the_bad_record(tmp_path):
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps([{"id": "a"}, {"id": "b", "evaluation_criteria": {"actions": [{"arguments": {}}]}}]))
    with pytest.raises(DataError, match=r"tasks.json:2:evaluation_criteria.actions.0.name: Field required"):
        read_tasks(p)
    p.write_text(json.dumps([{"id": "a"}, {"id": "a"}]))
    with pytest.raises(DataError, match="duplicate task id 'a'"):
        read_tasks(p)


def _mock_folder(root):
    folder = root / "mock"
    folder.mkdir()
    (folder / "db.json").write_text(json.dumps({"tasks": {}, "users": {}}))
    (folder / "policy.md").write_text("p")
    (folder / "tasks.json").write_text(json.dumps([{"id": "a", "ticket": "t"}]))
    (folder / "split_tasks.json").write_text(json.dumps({"base": ["a"]}))
    return folder


@pytest.mark.parametrize("name, content, message", [
    ("policy.md", b"caf\xe9", r"policy.md: not UTF-8 text \(byte 0xe9 at offset 3\)"),
    ("db.json", b'{"users": {"\xff": 1}}', r"db.json: not UTF-8 text \(byte 0xff at offset 12\)"),
    ("tasks.json", b'[{"id": "a", "ticket": "caf\xe9"}]', r"tasks.json: not UTF-8 text \(byte 0xe9"),
    ("split_tasks.json", b'{"base": ["a"],}', r"split_tasks.json: not valid JSON \(Expecting property name"),
])
def test_a_bad_byte_or_comma_in_any_domain_file_names_that_file(tmp_path, name, content, message):
    """A domain is a dozen files: the error says which one (not a bare UnicodeDecodeError traceback)."""
    folder = _mock_folder(tmp_path)
    assert [t.id for t in load_domain("mock", tmp_path).tasks] == ["a"]  # the folder is good before the edit
    (folder / name).write_bytes(content)
    with pytest.raises(DataError, match=message):
        load_domain("mock", tmp_path)


def test_unknown_domain_and_missing_data_dir_are_clear(tmp_path):
    with pytest.raises(ValueError, match="no tools for domain 'hotel'"):
        load_domain("hotel", tmp_path)
    with pytest.raises(ValueError, match="set env.data_dir"):
        load_domain("retail")
    with pytest.raises(FileNotFoundError, match="no 'retail' domain under"):
        load_domain("retail", tmp_path)


def test_split_ids_are_found_in_the_other_task_files(tmp_path):
    folder = tmp_path / "mock"
    folder.mkdir()
    (folder / "db.json").write_text(json.dumps({"tasks": {}, "users": {}}))
    (folder / "policy.md").write_text("p")
    (folder / "tasks.json").write_text(json.dumps([{"id": "a", "ticket": "t"}]))
    (folder / "tasks_small.json").write_text(json.dumps([{"id": "s1", "ticket": "t"}, {"id": "s2", "ticket": "t"}]))
    (folder / "split_tasks.json").write_text(json.dumps({"small": ["s2", "s1"], "full": ["f1"], "base": ["a"]}))
    dom = load_domain("mock", tmp_path)
    assert [t.id for t in dom.get_tasks("base")] == ["a"] and [t.id for t in dom.tasks] == ["a"]
    assert [t.id for t in dom.get_tasks("small")] == ["s2", "s1"]
    with pytest.raises(ValueError, match="may need tasks_full.json"):
        dom.get_tasks("full")
