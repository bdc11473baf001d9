"""Same observations, databases and grades as τ²-bench (mock, retail from ../shared/tau2).

The expected strings are written out from τ²-bench's rules, not produced by memrl:
a tool result is ``json.dumps`` (default separators, ASCII) of the pydantic model's
``model_dump()`` (fields in model order, unset optionals null, declared floats
floats); a refusal is ``f"Error: {exception}"``; arguments reach the Python method
unchecked.
"""

from __future__ import annotations

import json
import random

import pytest

from memrl.envs.domain import load_domain
from memrl.envs.environment import db_hash
from memrl.envs.evaluate import evaluate, history_messages, replay_gold, run_calls
from memrl.envs.messages import Message, ToolCall
from memrl.envs.toolkit import Raw, to_text


@pytest.fixture(scope="module")
def retail(tau2_dir):
    return load_domain("retail", tau2_dir)


@pytest.fixture(scope="module")
def mock(tau2_dir):
    return load_domain("mock", tau2_dir)


def step(env, name, **args):
    return env.step(ToolCall(name, args))


# -- aliasing: every environment owns its data ---------------------------------------------------
def _writes(domain, task) -> bool:
    env = domain.new_env()
    return any(env.is_write(a.name, a.requestor) for a in task.evaluation_criteria.actions or [])


def test_a_trajectory_without_tool_calls_scores_zero_where_the_gold_writes(mock, retail):
    tasks = [(mock, t) for t in mock.tasks] + [(retail, t) for t in random.Random(1).sample(retail.tasks, 12)]
    checked = 0
    for domain, task in tasks:
        crit = task.evaluation_criteria
        if not _writes(domain, task) or "DB" not in crit.reward_basis:
            continue
        noop = history_messages(task) + [Message("assistant", "All done.")]
        info = evaluate(domain, task, noop)
        assert info.db_match is False and info.reward == 0.0, task.id
        checked += 1
    assert checked >= 10


def test_evaluation_leaves_the_task_and_later_environments_untouched(mock):
    task = next(t for t in mock.tasks if t.id == "update_task_with_initialization_data")
    before = task.model_dump()
    fresh = mock.new_env()
    fresh.set_state(task.initial_state)
    start = fresh.db_hash()
    assert replay_gold(mock, task).reward == 1.0
    assert evaluate(mock, task, [Message("assistant", "done")]).reward == 0.0  # was 1.0 through aliasing
    assert task.model_dump() == before
    again = mock.new_env()
    again.set_state(task.initial_state)
    assert again.db_hash() == start and again.tools.db["tasks"]["task_2"]["status"] == "pending"


def test_call_arguments_are_copied_into_the_database(mock):
    env = mock.new_env()
    args = {"user_id": "user_1", "title": "T"}
    step(env, "create_task", **args)
    args["title"] = "changed"
    assert env.tools.db["tasks"]["task_2"]["title"] == "T"


def test_agent_data_points_the_user_tools_at_the_agent_database(mock):
    """τ²-bench: after ``agent_data`` the user toolkit shares the (new) agent database."""
    task = next(t for t in mock.tasks if t.id == "update_task_with_initialization_data")
    env = mock.new_env()
    env.set_state(task.initial_state)
    assert env.user_tools.db is env.tools.db and env.user_db_hash() == env.db_hash()


# -- observations ---------------------------------------------------------------------------------
ORDER_W6002958 = (
    '{"order_id": "#W6002958", "user_id": "anya_sanchez_9707", "address": {"address1": "308 Main Street", '
    '"address2": "Suite 214", "city": "Columbus", "country": "USA", "state": "OH", "zip": "43171"}, '
    '"items": [{"name": "Sneakers", "product_id": "7471004230", "item_id": "2509076505", "price": 189.5, '
    '"options": {"size": "10", "color": "gray", "material": "leather"}}], "status": "pending", '
    '"fulfillments": [], "payment_history": [{"transaction_type": "payment", "amount": 189.5, '
    '"payment_method_id": "paypal_1191071"}], "cancel_reason": null, "exchange_items": null, '
    '"exchange_new_items": null, "exchange_payment_method_id": null, "exchange_price_difference": null, '
    '"return_items": null, "return_payment_method_id": null}')
USER_MEI = (
    '{"user_id": "mei_kim_3337", "name": {"first_name": "Mei", "last_name": "Kim"}, "address": '
    '{"address1": "878 Highland Drive", "address2": "Suite 894", "city": "Houston", "country": "USA", '
    '"state": "TX", "zip": "77083"}, "email": "mei.kim6594@example.com", "payment_methods": '
    '{"gift_card_3505897": {"source": "gift_card", "id": "gift_card_3505897", "balance": 28.0}}, '
    '"orders": ["#W3263208"]}')


def test_retail_observations_are_tau2_strings(retail):
    env = retail.new_env()
    assert step(env, "get_order_details", order_id="#W6002958").content == ORDER_W6002958
    assert step(env, "get_user_details", user_id="mei_kim_3337").content == USER_MEI
    cancelled = json.loads(ORDER_W6002958)
    cancelled["status"], cancelled["cancel_reason"] = "cancelled", "ordered by mistake"
    cancelled["payment_history"].append({"transaction_type": "refund", "amount": 189.5,
                                         "payment_method_id": "paypal_1191071"})
    obs = step(env, "cancel_pending_order", order_id="#W6002958", reason="ordered by mistake")
    assert obs.content == json.dumps(cancelled)
    assert step(env, "find_user_id_by_email", email="MEI.KIM6594@example.com").content == "mei_kim_3337"
    assert step(env, "calculate", expression="(2 + 3) * 1.111").content == "5.55"
    assert step(env, "transfer_to_human_agents", summary="x").content == "Transfer successful"


def test_tool_errors_are_tau2_strings(retail, mock):
    env = retail.new_env()
    cases = [
        (step(env, "find_user_id_by_email", email=" mei.kim6594@example.com "), "Error: User not found"),
        (step(env, "get_order_details"),
         "Error: RetailTools.get_order_details() missing 1 required positional argument: 'order_id'"),
        (step(env, "get_order_details", order_id="#W6002958", verbose=True),
         "Error: RetailTools.get_order_details() got an unexpected keyword argument 'verbose'"),
        (step(env, "refund_everything"), "Error: Tool 'refund_everything' not found."),
        (step(env, "calculate", expression="1 / 0"), "Error: division by zero"),
        (step(env, "calculate", expression="2 ** x"), "Error: Invalid characters in expression"),
        (step(env, "return_delivered_order_items", order_id="#W0000000", item_ids=[], payment_method_id="x"),
         "Error: Order not found"),
    ]
    for obs, text in cases:
        assert obs.error and obs.content == text
    menv = mock.new_env()
    assert step(menv, "update_task_status", task_id="task_1").content == (
        "Error: MockTools.update_task_status() missing 1 required positional argument: 'status'")


def test_mock_observations_and_unchecked_status(mock):
    env = mock.new_env()
    assert step(env, "create_task", user_id="user_1", title="Call").content == (
        '{"task_id": "task_2", "title": "Call", "description": null, "status": "pending"}')
    done = step(env, "update_task_status", task_id="task_1", status="done")  # τ² does not check the literal
    assert not done.error and json.loads(done.content)["status"] == "done"
    users = '[{"user_id": "user_1", "name": "Test User", "tasks": ["task_1", "task_2"]}]'
    assert step(env, "get_users").content == users


def test_to_text_follows_tau2():
    assert to_text({"name": "Zoë", "n": 1.0, "x": None}) == '{"name": "Zo\\u00eb", "n": 1.0, "x": null}'
    assert to_text(True) == "True" and to_text(2.5) == "2.5" and to_text("as is") == "as is"
    assert to_text(None) == "null"
    assert to_text(Raw({"n": 1.5, "ok": True, "xs": [1, None]})) == '{"n": "1.5", "ok": "True", "xs": ["1", null]}'


# -- modify_pending_order_items -------------------------------------------------------------------
MOD = {"order_id": "#W5918442", "item_ids": ["1725100896", "5312063289"],
       "new_item_ids": ["9007697085", "6843647669"], "payment_method_id": "credit_card_5051208"}


def test_modify_items_takes_the_last_variant_and_an_unrounded_amount(tau2_dir, retail):
    env = retail.new_env()
    db = env.tools.db
    last = db["products"][db["orders"]["#W5918442"]["items"][1]["product_id"]]["variants"]["6843647669"]
    obs = step(env, "modify_pending_order_items", **MOD)
    order = json.loads(obs.content)
    assert [it["item_id"] for it in order["items"][:2]] == MOD["new_item_ids"]
    assert [it["price"] for it in order["items"][:2]] == [last["price"]] * 2  # both: the last variant's
    assert [it["options"] for it in order["items"][:2]] == [last["options"]] * 2
    diff = 0
    diff += 318.96 - 289.66
    diff += 180.1 - 195.15
    assert order["payment_history"][-1] == {"transaction_type": "payment", "amount": abs(diff),
                                            "payment_method_id": "credit_card_5051208"}
    assert order["status"] == "pending (item modified)"
    # the documented option prices each item by its own variant
    own = load_domain("retail", tau2_dir, tool_options={"per_item_variant": True}).new_env()
    order = json.loads(step(own, "modify_pending_order_items", **MOD).content)
    assert [it["price"] for it in order["items"][:2]] == [318.96, 180.1]
    with pytest.raises(ValueError, match="no tool option"):
        load_domain("retail", tau2_dir, tool_options={"bogus": 1})


def test_gold_replays_are_deterministic_and_hash_like_tau2(retail):
    """Side by side: every sampled task's gold actions give the same observations on two fresh
    environments, and the database hash is τ²'s (``json.dumps(sort_keys=True, default=str)``)."""
    for task in random.Random(3).sample(retail.tasks, 8):
        calls = [ToolCall(a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions or []]
        a, b = run_calls(retail, task, calls), run_calls(retail, task, calls)
        assert [m.content for m in a] == [m.content for m in b]
    env = retail.new_env()
    import hashlib

    want = hashlib.sha256(json.dumps(env.tools.db, sort_keys=True, default=str).encode()).hexdigest()
    assert db_hash(env.tools.db) == want


# -- grading ---------------------------------------------------------------------------------------
def test_logs_that_tau2_cannot_replay_score_zero(retail):
    task = next(t for t in retail.tasks if any(a.name == "cancel_pending_order"
                                               for a in t.evaluation_criteria.actions))
    calls = [ToolCall(a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions]
    good = run_calls(retail, task, calls)
    assert evaluate(retail, task, good).db_match is True
    no_results = [m for m in good if m.role != "tool"]
    info = evaluate(retail, task, no_results)
    assert info.reward == 0.0 and "Tool message expected" in info.note
    forged = [Message("tool", '"cancelled"', call_id=m.call_id) if m.role == "tool" and "cancel_reason" in
              (m.content or "") else m for m in good]
    info = evaluate(retail, task, forged)
    assert info.reward == 0.0 and "cannot be replayed" in info.note
    stray = good[:1] + [Message("tool", "x")] + good[1:]
    assert evaluate(retail, task, stray).reward == 0.0


def test_unjudged_nl_assertions_are_said_in_the_note(retail):
    task = next(t for t in retail.tasks if t.evaluation_criteria.nl_assertions
                and "NL_ASSERTION" in t.evaluation_criteria.reward_basis)
    info = replay_gold(retail, task)
    assert info.nl_unchecked == len(task.evaluation_criteria.nl_assertions) and "not judged" in info.note
    judged = replay_gold(retail, task, nl_judge=lambda asserts, msgs: [False] * len(asserts))
    assert judged.reward == 0.0 and judged.nl_unchecked == 0


# -- side by side with τ²'s data model -----------------------------------------------------------
RETURNS = {"get_order_details": "Order", "cancel_pending_order": "Order", "exchange_delivered_order_items": "Order",
           "modify_pending_order_address": "Order", "modify_pending_order_items": "Order",
           "modify_pending_order_payment": "Order", "return_delivered_order_items": "Order",
           "get_user_details": "User", "modify_user_address": "User", "get_product_details": "Product",
           "get_item_details": "Variant"}


def test_observations_and_databases_match_tau2_models_side_by_side(tau2_dir, retail):
    """Gold replays of tasks covering every retail tool: each model-valued observation equals the dump
    of τ²'s pydantic model, and the final database hashes as τ²'s ``RetailDB.model_dump()``."""
    from tests.envs import tau2_models as m

    raw = json.loads((tau2_dir / "retail" / "db.json").read_text())
    assert json.dumps(m.RetailDB.model_validate(raw).model_dump()) == retail.db_text
    seen: set[str] = set()
    picked = []
    for task in retail.tasks:
        names = {a.name for a in task.evaluation_criteria.actions or []}
        if names - seen or len(picked) < 6:
            picked.append(task)
            seen |= names
    assert set(RETURNS) <= seen
    compared = 0
    for task in picked:
        calls = [ToolCall(a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions or []]
        log = run_calls(retail, task, calls)
        for call, obs in zip(calls, [x for x in log if x.role == "tool"]):
            if obs.error or call.name not in RETURNS:
                continue
            model = getattr(m, RETURNS[call.name])
            assert obs.content == json.dumps(model.model_validate(json.loads(obs.content)).model_dump()), call
            compared += 1
        env = retail.new_env()
        env.set_state(task.initial_state, log)
        dumped = m.RetailDB.model_validate(env.tools.db).model_dump()
        assert db_hash(dumped) == env.db_hash(), task.id
    assert compared >= 40


def test_mock_database_is_tau2s_dump(tau2_dir, mock):
    from tests.envs import tau2_models as m

    raw = json.loads((tau2_dir / "mock" / "db.json").read_text())
    assert json.dumps(m.MockDB.model_validate(raw).model_dump()) == mock.db_text
