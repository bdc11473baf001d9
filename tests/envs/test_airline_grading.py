"""Grading τ²-bench's airline tasks in memrl: gold replays, splits, and graded wrong episodes.

Every airline task is graded on DB and COMMUNICATE (its NL assertions are not in the reward
basis, so they are not judged); the expected rewards follow τ²-bench's evaluator: the database
hash after replaying the episode's writes against the one after the gold actions, and each
required string said by the agent (commas removed, any case).
"""

from __future__ import annotations

import pytest

from memrl.envs.domain import load_domain
from memrl.envs.evaluate import evaluate, history_messages, replay_gold, run_calls
from memrl.envs.messages import Message, ToolCall


@pytest.fixture(scope="module")
def airline(tau2_dir):
    return load_domain("airline", tau2_dir)


def task(domain, task_id):
    return next(t for t in domain.tasks if t.id == task_id)


def gold_calls(t):
    return [ToolCall(a.name, dict(a.arguments)) for a in t.evaluation_criteria.actions]


def test_splits_and_no_solo_mode(airline):
    assert [len(airline.get_tasks(s)) for s in ("train", "test", "base")] == [30, 20, 50]
    assert {t.id for t in airline.get_tasks("train")} | {t.id for t in airline.get_tasks("test")} == {
        t.id for t in airline.tasks}
    with pytest.raises(ValueError, match="Airline domain does not support solo mode"):
        airline.new_env(solo=True)
    assert all(t.evaluation_criteria.reward_basis == ["DB", "COMMUNICATE"] for t in airline.tasks)


# tasks whose gold actions use every write tool: flights, bags, passengers, cancel, book (certificates,
# gift cards, three bookings in one task), and a calculate
EVERY_WRITE = ("7", "8", "11", "12", "14", "17", "23", "32")


@pytest.mark.parametrize("task_id", EVERY_WRITE)
def test_gold_replays_score_one(airline, task_id):
    info = replay_gold(airline, task(airline, task_id))
    assert info.reward == 1.0 and info.db_match is True and info.nl_unchecked == 0 and not info.note


@pytest.mark.slow
def test_every_gold_replay_scores_one(airline):
    assert [t.id for t in airline.tasks if replay_gold(airline, t).reward != 1.0] == []


def test_three_bookings_leave_the_database_as_tau2(airline):
    """Task 23: K1NW8N cancelled, then one business booking per passenger (871 each): HATHAT, HATHAU,
    HATHAV, three certificates removed, both gift cards emptied, 3 business seats gone per flight."""
    t = task(airline, "23")
    env = airline.new_env()
    env.set_state(None, run_calls(airline, t, gold_calls(t)))
    db = env.tools.db
    user = db["users"]["mohamed_silva_9265"]
    assert user["reservations"] == ["K1NW8N", "HATHAT", "HATHAU", "HATHAV"]
    assert sorted(user["payment_methods"]) == ["credit_card_2198526", "credit_card_5843230", "gift_card_6136092",
                                               "gift_card_8020792"]
    assert [user["payment_methods"][g]["amount"] for g in ("gift_card_8020792", "gift_card_6136092")] == [0.0, 0.0]
    paid = [[p["amount"] for p in db["reservations"][r]["payment_history"]] for r in ("HATHAT", "HATHAU", "HATHAV")]
    assert paid == [[500, 198, 129, 44], [250, 621], [250, 621]] and all(sum(p) == 871 for p in paid)
    assert db["reservations"]["K1NW8N"]["payment_history"] == [
        {"payment_id": "gift_card_6136092", "amount": 567}, {"payment_id": "gift_card_6136092", "amount": -567}]
    assert db["flights"]["HAT023"]["dates"]["2024-05-26"]["available_seats"]["business"] == 6 - 3


def test_wrong_episodes_are_graded_as_tau2(airline):
    t = task(airline, "14")  # must say 327, 1000 and 1786
    assert t.evaluation_criteria.communicate_info == ["327", "1000", "1786"]
    done = run_calls(airline, t, gold_calls(t))
    said = Message("assistant", "You pay 1,786 by card after 1,000 in certificates and 327 in gift cards.")
    right = evaluate(airline, t, done + [said])
    assert right.reward == 1.0 and right.breakdown == {"DB": 1.0, "COMMUNICATE": 1.0}
    silent = evaluate(airline, t, done + [Message("assistant", "Booked.")])
    assert silent.reward == 0.0 and silent.breakdown == {"DB": 1.0, "COMMUNICATE": 0.0}
    extra = run_calls(airline, t, gold_calls(t) + [ToolCall("send_certificate", {"user_id": "mohamed_silva_9265",
                                                                                "amount": 50})])
    assert evaluate(airline, t, extra + [said]).breakdown == {"DB": 0.0, "COMMUNICATE": 1.0}
    assert evaluate(airline, t, done + [said], ending="max_steps").reward == 0.0
    # task 0 needs no action: reading is free, cancelling (the policy forbids it here) is graded down
    t0 = task(airline, "0")
    reads = run_calls(airline, t0, [ToolCall("get_reservation_details", {"reservation_id": "EHGLP3"})])
    assert evaluate(airline, t0, reads + [Message("assistant", "I cannot cancel it.")]).reward == 1.0
    cancel = run_calls(airline, t0, [ToolCall("cancel_reservation", {"reservation_id": "EHGLP3"})])
    assert evaluate(airline, t0, cancel).reward == 0.0
    assert evaluate(airline, t0, history_messages(t0) + [Message("assistant", "No.")]).nl_unchecked == 0
