"""τ²-bench domains (mock, retail) from ../shared/tau2: gold replays, wrong actions, tool rules."""

from __future__ import annotations

import random

import pytest

from memrl.envs.domain import load_domain
from memrl.envs.evaluate import evaluate, replay_gold, run_calls
from memrl.envs.messages import Message, ToolCall


@pytest.fixture(scope="module")
def retail(tau2_dir):
    return load_domain("retail", tau2_dir)


@pytest.fixture(scope="module")
def mock(tau2_dir):
    return load_domain("mock", tau2_dir)


def test_loads_the_published_layout(tau2_dir, retail, mock):
    assert len(retail.tasks) == 114 and len(retail.get_tasks("train")) == 74 and len(retail.get_tasks("test")) == 40
    assert len(mock.tasks) == 10 and mock.solo_policy and mock.user_toolkit is not None
    # a tau2-bench clone layout works too
    clone = tau2_dir.parent / "clone-layout-does-not-exist"
    with pytest.raises(FileNotFoundError):
        load_domain("mock", clone)


def test_retail_gold_replays_score_one(retail):
    for task in random.Random(0).sample(retail.tasks, 25):
        assert replay_gold(retail, task).reward == 1.0, task.id


def test_mock_gold_replays_score_one(mock):
    # Two tasks need steps that are not gold agent actions: the agent must finish the task from the
    # history (no gold actions), and the user must read a notification (a user tool).
    needs_more = {"update_task_with_history_and_env_assertions", "update_task_with_user_tools"}
    for task in mock.tasks:
        assert (replay_gold(mock, task).reward == 1.0) != (task.id in needs_more), task.id
    t = next(x for x in mock.tasks if x.id == "update_task_with_history_and_env_assertions")
    msgs = run_calls(mock, t, [ToolCall("update_task_status", {"task_id": "task_2", "status": "completed"})])
    assert evaluate(mock, t, msgs).reward == 1.0
    t = next(x for x in mock.tasks if x.id == "update_task_with_user_tools")
    msgs = run_calls(mock, t, [ToolCall("check_notifications", {}, requestor="user"),
                               ToolCall("update_task_status", {"task_id": "task_1", "status": "completed"}),
                               ToolCall("dismiss_notification", {"notification_id": "notif_1"}, requestor="user")])
    assert msgs[-1].content == "Notification notif_1 dismissed"
    info = evaluate(mock, t, msgs)
    assert info.action_checks == [True] and info.env_assertion_checks == [True]
    # the user's own write is not among the gold actions, so the user-side database differs from the gold
    # replay and the DB component fails, as tau2-bench's hash comparison of both databases would
    assert info.db_match is False


def test_mock_initial_state_is_applied(mock):
    t = next(x for x in mock.tasks if x.id == "update_task_with_initialization_actions")
    env = mock.new_env()
    env.set_state(t.initial_state)
    assert env.tools.db["tasks"]["task_2"]["title"] == "Project Review"
    t = next(x for x in mock.tasks if x.id == "update_task_with_initialization_data")
    env = mock.new_env()
    env.set_state(t.initial_state)
    assert env.tools.db["users"]["user_1"]["tasks"] == ["task_1", "task_2"]


def test_retail_wrong_action_scores_zero(retail):
    task = next(t for t in retail.tasks if any(a.name == "cancel_pending_order" for a in t.evaluation_criteria.actions))
    calls = [ToolCall(a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions]
    assert evaluate(retail, task, run_calls(retail, task, calls)).reward == 1.0
    wrong = [ToolCall(c.name, {**c.arguments, "reason": "no longer needed" if c.arguments.get("reason")
                               == "ordered by mistake" else "ordered by mistake"})
             if c.name == "cancel_pending_order" else c for c in calls]
    assert evaluate(retail, task, run_calls(retail, task, wrong)).reward == 0.0
    assert evaluate(retail, task, [Message("assistant", "Sorry, I cannot help.")]).reward == 0.0


def test_retail_cancel_refunds_gift_cards_at_once(retail):
    env = retail.new_env()
    db = env.tools.db
    order = next(o for o in db["orders"].values() if o["status"] == "pending" and len(o["payment_history"]) == 1
                 and o["payment_history"][0]["payment_method_id"].startswith("gift_card"))
    pay = order["payment_history"][0]
    card = db["users"][order["user_id"]]["payment_methods"][pay["payment_method_id"]]
    before = card["balance"]
    obs = env.step(ToolCall("cancel_pending_order", {"order_id": order["order_id"], "reason": "ordered by mistake"}))
    assert not obs.error
    assert order["status"] == "cancelled" and order["cancel_reason"] == "ordered by mistake"
    assert order["payment_history"][-1] == {"transaction_type": "refund", "amount": pay["amount"],
                                            "payment_method_id": pay["payment_method_id"]}
    assert card["balance"] == round(before + pay["amount"], 2)
    again = env.step(ToolCall("cancel_pending_order", {"order_id": order["order_id"], "reason": "ordered by mistake"}))
    assert again.error and "Non-pending order cannot be cancelled" in again.content
    bad = env.step(ToolCall("cancel_pending_order", {"order_id": "#W0000000", "reason": "x"}))
    assert bad.error and "Order not found" in bad.content


def test_retail_calculate_and_lookup(retail):
    env = retail.new_env()
    assert env.step(ToolCall("calculate", {"expression": "(2 + 3) * 1.111"})).content == "5.55"
    assert env.step(ToolCall("calculate", {"expression": "__import__('os')"})).error
    user = next(iter(env.tools.db["users"].values()))
    found = env.step(ToolCall("find_user_id_by_email", {"email": user["email"].upper()}))
    assert found.content == user["user_id"]
    n = user["name"]
    found = env.step(ToolCall("find_user_id_by_name_zip", {"first_name": n["first_name"], "last_name": n["last_name"],
                                                           "zip": user["address"]["zip"]}))
    assert found.content == user["user_id"]


def test_telecom_workflow_is_telecom_with_the_workflow_guide(tau2_dir):
    flow = load_domain("telecom-workflow", tau2_dir)
    plain = load_domain("telecom", tau2_dir)
    assert flow.name == "telecom-workflow" and flow.db_text == plain.db_text and flow.policy != plain.policy
    assert (tau2_dir / "telecom" / "tech_support_workflow.md").read_text().strip()[:200] in flow.policy
    assert (tau2_dir / "telecom" / "tech_support_workflow_solo.md").read_text().strip()[:200] in flow.solo_policy
    assert [t.id for t in flow.tasks] == [t.id for t in plain.tasks]
