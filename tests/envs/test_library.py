"""The built-in library domain: every task's gold actions score 1.0; wrong or extra writes do not."""

from __future__ import annotations

import pytest

from memrl.envs.domain import load_domain
from memrl.envs.evaluate import evaluate, replay_gold, run_calls
from memrl.envs.messages import Message, ToolCall


@pytest.fixture(scope="module")
def lib():
    return load_domain("library")


def test_domain_shape(lib):
    assert len(lib.tasks) >= 30
    assert 5 <= len(lib.new_env().tools.tools) <= 8
    assert set(lib.splits) >= {"train", "test"}
    assert not set(lib.splits["train"]) & set(lib.splits["test"])
    assert len(lib.get_tasks("train")) + len(lib.get_tasks("test")) == len(lib.tasks)


def test_every_builtin_task_replays_to_reward_one(lib):
    for task in lib.tasks:
        info = replay_gold(lib, task)
        assert info.reward == 1.0, (task.id, info)


def _calls(task, *calls: ToolCall, text: str = "done") -> list[Message]:
    """A well-formed log: each call followed by the observation a live environment returned."""
    return run_calls(load_domain("library"), task, calls) + [Message("assistant", text)]


def test_wrong_and_extra_writes_score_below_one(lib):
    task = next(t for t in lib.tasks if t.id.startswith("return_") and t.id[7].isdigit())
    loan = task.evaluation_criteria.actions[0].arguments["loan_id"]
    other = next(lid for lid, v in lib.new_env().tools.db["loans"].items() if lid != loan and v["status"] == "active")
    assert evaluate(lib, task, _calls(task, ToolCall("return_book", {"loan_id": loan}))).reward == 1.0
    assert evaluate(lib, task, _calls(task, ToolCall("return_book", {"loan_id": other}))).reward == 0.0
    extra = _calls(task, ToolCall("return_book", {"loan_id": loan}), ToolCall("return_book", {"loan_id": other}))
    assert evaluate(lib, task, extra).reward == 0.0
    # doing nothing leaves the database unchanged: wrong too
    assert evaluate(lib, task, _calls(task)).reward == 0.0
    # an episode cut by the turn limit scores 0 even with the right calls
    cut = _calls(task, ToolCall("return_book", {"loan_id": loan}))
    assert evaluate(lib, task, cut, ending="max_turns").reward == 0.0


def test_refusal_tasks_reward_making_no_change(lib):
    task = next(t for t in lib.tasks if t.id.startswith("checkout_blocked"))
    member = task.evaluation_criteria.actions[0].arguments["member_id"]
    assert evaluate(lib, task, _calls(task, ToolCall("get_member_details", {"member_id": member}))).reward == 1.0
    book = next(b for b, v in lib.new_env().tools.db["books"].items() if v["available_copies"] > 0)
    # the tool itself refuses (fines), so the database is unchanged and the episode still passes...
    env = lib.new_env()
    obs = env.step(ToolCall("checkout_book", {"member_id": member, "book_id": book}))
    assert obs.error and "fines" in obs.content
    # ...but paying the fine to get the book changes the database: not what was asked
    fines = env.tools.db["members"][member]["fines"]
    paid = _calls(task, ToolCall("pay_fine", {"member_id": member, "amount": fines}),
                  ToolCall("checkout_book", {"member_id": member, "book_id": book}))
    assert evaluate(lib, task, paid).reward == 0.0


def test_library_rules_hand_checked(lib):
    env = lib.new_env()
    db = env.tools.db
    # a loan due 2026-03-01 returned on 2026-03-10 is 9 days late: 9 * 0.25 = 2.25 added
    loan = next(v for v in db["loans"].values() if v["due_date"] == "2026-03-01")
    before = db["members"][loan["member_id"]]["fines"]
    out = env.tools.tools["return_book"]({"loan_id": loan["loan_id"]})
    assert out["late_days"] == 9 and out["fine_added"] == 2.25
    assert db["members"][loan["member_id"]]["fines"] == round(before + 2.25, 2)
    assert env.step(ToolCall("return_book", {"loan_id": loan["loan_id"]})).error  # already returned
    # renewal: +14 days once, then refused
    ok = next(v for v in db["loans"].values() if v["status"] == "active" and v["renewals"] == 0
              and v["due_date"] >= "2026-03-10" and not db["books"][v["book_id"]]["holds"])
    due = ok["due_date"]
    env.tools.tools["renew_loan"]({"loan_id": ok["loan_id"]})
    import datetime as dt

    assert ok["due_date"] == (dt.date.fromisoformat(due) + dt.timedelta(days=14)).isoformat()
    second = env.step(ToolCall("renew_loan", {"loan_id": ok["loan_id"]}))
    assert second.error and "already renewed" in second.content
    # checkout creates the next loan id, due in 21 days, and takes a copy
    m = next(v for v in db["members"].values() if v["fines"] < 5 and len(v["loans"]) < 3)
    b = next(v for v in db["books"].values() if v["available_copies"] > 0)
    copies, n = b["available_copies"], len(db["loans"])
    loan2 = env.tools.tools["checkout_book"]({"member_id": m["member_id"], "book_id": b["book_id"]})
    assert loan2["loan_id"] == f"L{n + 1:03d}" and loan2["due_date"] == "2026-03-31"
    assert b["available_copies"] == copies - 1
    assert env.step(ToolCall("pay_fine", {"member_id": m["member_id"], "amount": 1000})).error
