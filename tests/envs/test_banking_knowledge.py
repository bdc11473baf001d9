"""τ³'s banking_knowledge domain (../shared/tau2/banking_knowledge): gold replays, τ³'s grading rules, tools.

Expected texts and ids below are τ³'s own outputs (its v1.0.1 code run on the same calls, checked
by hand against its source): deterministic ids are SHA-256 prefixes of the call's fields.
"""

from __future__ import annotations

import json

import pytest

from memrl.envs.domain import load_domain
from memrl.envs.domains.banking_knowledge import records
from memrl.envs.evaluate import evaluate, replay_gold, run_calls
from memrl.envs.messages import ToolCall


@pytest.fixture(scope="module")
def bank(tau2_dir):
    if not (tau2_dir / "banking_knowledge" / "documents").is_dir():
        pytest.skip(f"no banking_knowledge data in {tau2_dir}")
    return load_domain("banking_knowledge", tau2_dir)


def _task(bank, task_id):
    return next(t for t in bank.tasks if t.id == task_id)


def _gold_calls(task):
    return [ToolCall(a.name, dict(a.arguments), requestor=a.requestor) for a in task.evaluation_criteria.actions]


def test_every_gold_replay_scores_one(bank):
    assert len(bank.tasks) == 97
    failed = [t.id for t in bank.tasks if replay_gold(bank, t).reward != 1.0]
    assert failed == []


def test_gold_outputs_and_ids_are_tau3s(bank):
    task = _task(bank, "task_031")
    msgs = run_calls(bank, task, _gold_calls(task))
    results = [m.content for m in msgs if m.role == "tool"]
    assert results[2].endswith("Last 4 digits of card: 5320")
    assert results[4] == ("Credit card transaction dispute filed successfully. A case has been opened and will be "
                          "reviewed within 10 business days.\n\nExecuted: file_credit_card_transaction_dispute_4829\n"
                          "Dispute ID: dsp_e3462a840774\nTransaction: txn_adea68821a1d\n"
                          "Reason: Goods Services Not As Described\nResolution Requested: Full Refund\n"
                          "Provisional Credit: Not eligible at this time.")
    # the id is τ³'s: "dsp_" + the first 12 hex digits of sha256("dispute:{user}:{transaction}")
    assert records.dispute_id("890389b165", "txn_adea68821a1d") == "dsp_e3462a840774"
    assert "  - partial_refund_amount: number (optional) - Amount requested for partial refund" in results[3]


def test_gold_reads_are_graded_through_the_tasks_allowlist(bank):
    # task_046's gold actions read the dispute history through call_discoverable_agent_tool: τ³ logs that
    # read (and so requires it in the database) because the task's gold names it; other reads are not logged
    task = _task(bank, "task_046")
    gold = _gold_calls(task)
    assert evaluate(bank, task, run_calls(bank, task, gold)).reward == 1.0
    skipped = [c for c in gold if c.arguments.get("agent_tool_name") != "get_user_dispute_history_7291"
               or c.name != "call_discoverable_agent_tool"]
    info = evaluate(bank, task, run_calls(bank, task, skipped))
    assert info.reward == 0.0 and info.db_match is False
    extra = gold + [ToolCall("unlock_discoverable_agent_tool", {"agent_tool_name": "get_closure_reason_history_8293"}),
                    ToolCall("call_discoverable_agent_tool", {"agent_tool_name": "get_closure_reason_history_8293",
                                                              "arguments": '{"credit_card_account_id": "x"}'})]
    assert evaluate(bank, task, run_calls(bank, task, extra)).reward == 1.0


def test_a_changed_write_fails_the_database_check(bank):
    task = _task(bank, "task_001")
    call = _gold_calls(task)[0]
    assert call.name == "apply_for_credit_card" and call.requestor == "user"
    wrong = ToolCall(call.name, {**call.arguments, "card_type": "Silver Rewards Card"}, requestor="user")
    assert evaluate(bank, task, run_calls(bank, task, [wrong])).reward == 0.0
    # 100000 and 100000.0 are one application (τ³ reads the income as a float before hashing)
    as_float = ToolCall(call.name, {**call.arguments, "annual_income": 100000.0}, requestor="user")
    assert evaluate(bank, task, run_calls(bank, task, [as_float])).reward == 1.0


def test_discoverable_tools_are_hidden_until_unlocked(bank):
    env = bank.new_env(task=_task(bank, "task_031"))
    shown = [s["function"]["name"] for s in env.tool_schemas()]
    assert shown[:3] == ["KB_search", "transfer_to_human_agents", "get_current_time"]
    assert "close_bank_account_7392" not in shown and "close_bank_account_7392" in env.tools.tools
    before = env.step(ToolCall("call_discoverable_agent_tool", {"agent_tool_name": "close_bank_account_7392"}))
    assert before.content == ("Error: Tool 'close_bank_account_7392' has not been unlocked. You must first use "
                              "`unlock_discoverable_agent_tool` to unlock this tool before calling it.")
    env.step(ToolCall("unlock_discoverable_agent_tool", {"agent_tool_name": "close_bank_account_7392"}))
    missing = env.step(ToolCall("call_discoverable_agent_tool", {"agent_tool_name": "close_bank_account_7392",
                                                                 "arguments": "{}"}))
    assert missing.content == ("Error: Invalid arguments: KnowledgeTools.close_bank_account_7392() missing 1 required "
                               "positional argument: 'account_id'")
    listed = env.step(ToolCall("call_discoverable_agent_tool", {"agent_tool_name": "close_bank_account_7392",
                                                                "arguments": '[{"account_id": "a"}]'}))
    assert listed.content == ("Error: Invalid arguments: tau2.domains.banking_knowledge.tools.KnowledgeTools."
                              "close_bank_account_7392() argument after ** must be a mapping, not list")  # τ³'s text
    not_given = env.step(ToolCall("call_discoverable_user_tool", {"discoverable_tool_name": "deposit_check_3847",
                                                                  "arguments": '{"account_id": "a", "check_amount": 5}'},
                                  requestor="user"))
    assert not_given.content.startswith("Error: Tool 'deposit_check_3847' has not been given to you by the agent.")
    bad = env.step(ToolCall("transfer_to_human_agents", {"summary": "s", "reason": "because"}))
    assert bad.content.startswith("Error: Invalid transfer reason 'because'. Must be one of: fraud_or_security_concern")


def test_user_sees_the_tasks_tools_and_solo_is_refused(bank):
    task = _task(bank, "task_031")
    env = bank.new_env(task=task)
    assert task.user_tools == ["apply_for_credit_card", "call_discoverable_user_tool"]
    assert [s["function"]["name"] for s in env.user_tools.schemas()] == task.user_tools
    assert env.user_tools.db is env.tools.db  # one bank
    assert len(bank.new_env().user_tools.schemas()) == 6  # no task: every user tool
    with pytest.raises(ValueError, match="does not support solo mode"):
        bank.new_env(solo=True)


def test_database_is_tau3s_model():
    db = records.normalize_db({"users": {"data": {"u": {"name": "A"}}, "notes": "n", "extra": 1}})
    assert list(db) == list(records.TABLES) and db["users"] == {"data": {"u": {"name": "A"}}, "notes": "n"}
    assert db["debit_card_disputes"] == {"data": {}, "notes": ""}
    with pytest.raises(ValueError, match="unknown table"):
        records.normalize_db({"interest_discrepancy_reports": {}})
    listing = records.format_records("users", [("u", {"name": "A", "tags": ["x"]})])
    assert listing == "Found 1 record(s) in 'users':\n\n1. Record ID: u\n   name: A\n   tags: ['x']\n"
    assert json.loads(json.dumps(db)) == db


def test_tool_agent_episode_with_the_tasks_user_tools(bank):
    # the workflow builds the environment for the task: the simulated customer is offered only the task's
    # user tools (task_001: apply_for_credit_card), applies itself, and the episode is graded on the bank's DB
    import asyncio

    from memrl.config.schema import MemRLConfig
    from memrl.envs.user_sim import LLMUserSimulator
    from memrl.models.tiny import build_hf_tokenizer
    from memrl.testing.scripted import ScriptedEngine
    from memrl.workflows.common import encode_text
    from memrl.workflows.tool_agent import TaskSample, tool_agent
    from memrl.text.tool_calls import render_call

    task = _task(bank, "task_001")
    tok = build_hf_tokenizer(["tool_call name arguments apply_for_credit_card Gold Rewards Card"], vocab_size=400)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    apply = ToolCall("apply_for_credit_card", dict(task.evaluation_criteria.actions[0].arguments))
    user_texts = ["I want the best cash back card.", render_call(apply), "###STOP###"]
    uengine = ScriptedEngine(lambda p, k: encode_text(tok, user_texts[len(uengine.calls) - 1]) + [end])
    aengine = ScriptedEngine(lambda p, k: encode_text(tok, "The Gold Rewards Card fits you best.") + [end])
    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "max_total_tokens": 400_000,
                                                   "turn_tokens": 2048}})
    traj = asyncio.run(tool_agent(TaskSample(bank, task, solo=False, user=LLMUserSimulator(uengine, tok)),
                                  aengine, tok, cfg.workflow))
    assert traj.info["ending"] == "user_stop" and traj.metrics["user_tool_calls"] == 1 and traj.reward == 1.0
    user_prompt = tok.decode(uengine.calls[1][0])
    assert "apply_for_credit_card" in user_prompt and "submit_referral" not in user_prompt
