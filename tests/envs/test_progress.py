"""Progress reward: fraction of checks passed, hand-counted on library tasks and on made-up gradings."""

from __future__ import annotations

import pytest

from memrl.envs.domain import load_domain
from memrl.envs.evaluate import RewardInfo, evaluate, run_calls
from memrl.envs.messages import Message, ToolCall
from memrl.envs.progress import episode_reward, progress_checks, progress_reward


@pytest.fixture(scope="module")
def lib():
    return load_domain("library")


def _task(lib, task_id):
    return next(t for t in lib.tasks if t.id == task_id)


def _log(lib, task, calls, text="done"):
    return run_calls(lib, task, [ToolCall(n, a) for n, a in calls]) + [Message("assistant", text)]


def test_made_up_gradings():
    # DB wrong, 1 of 2 actions, 1 of 1 items: 2 of 4 checks
    info = RewardInfo(0.0, db_match=False, action_checks=[True, False], communicate_checks=[True])
    assert progress_checks(info) == [False, True, False, True]
    assert progress_reward(info) == 0.5
    # DB passes, 1 of 2 env assertions, 2 of 3 judged NL assertions: 4 of 6 checks
    info = RewardInfo(0.0, db_match=True, env_assertion_checks=[True, False], nl_checks=[True, True, False])
    assert progress_reward(info) == pytest.approx(4 / 6)
    # not graded (turn limit): no checks, the tau2 reward (0); no criteria at all: tau2's 1.0
    assert progress_reward(RewardInfo(0.0, note="episode ended early (max_turns)")) == 0.0
    assert progress_reward(RewardInfo(1.0, note="no evaluation criteria")) == 1.0


def test_three_step_task_partial_credit(lib):
    # return_email_1: find_member_by_email, get_member_details, return_book; basis DB only
    task = _task(lib, "return_email_1")
    email = {"email": "kara.novak@example.org"}
    full = evaluate(lib, task, _log(lib, task, [("find_member_by_email", email),
                                                ("get_member_details", {"member_id": "M011"}),
                                                ("return_book", {"loan_id": "L011"})]), solo=True)
    assert (full.reward, progress_reward(full)) == (1.0, 1.0)
    # stops after the look-ups: DB wrong, 2 of 3 actions -> 2 of 4
    early = evaluate(lib, task, _log(lib, task, [("find_member_by_email", email),
                                                 ("get_member_details", {"member_id": "M011"})]), solo=True)
    assert early.reward == 0.0 and progress_reward(early) == 0.5
    # returns the wrong loan of the same member: DB wrong, 2 of 3 actions again
    wrong = evaluate(lib, task, _log(lib, task, [("find_member_by_email", email),
                                                 ("get_member_details", {"member_id": "M011"}),
                                                 ("return_book", {"loan_id": "L020"})]), solo=True)
    assert wrong.reward == 0.0 and progress_reward(wrong) == 0.5


def test_communicate_item_counts(lib):
    # pay_fine_1: get_member_details, pay_fine 1.5, say '1.50' -> DB, 2 actions, 1 item
    task = _task(lib, "pay_fine_1")
    calls = [("get_member_details", {"member_id": "M003"}), ("pay_fine", {"member_id": "M003", "amount": 1.5})]
    said = evaluate(lib, task, _log(lib, task, calls, "You paid 1.50."), solo=True)
    silent = evaluate(lib, task, _log(lib, task, calls, "Your fines are paid."), solo=True)
    assert (said.reward, progress_reward(said)) == (1.0, 1.0)
    assert silent.reward == 0.0 and progress_reward(silent) == 0.75


def test_db_right_by_other_calls_is_tau2_success_but_not_full_progress(lib):
    # return_email_1 reached with the loan id alone: tau2 (basis DB) 1.0, progress 2 of 4 (1 action of 3)
    task = _task(lib, "return_email_1")
    info = evaluate(lib, task, _log(lib, task, [("return_book", {"loan_id": "L011"})]), solo=True)
    assert info.reward == 1.0 and progress_reward(info) == 0.5


def test_premature_ending_scores_zero(lib):
    task = _task(lib, "return_1")
    log = _log(lib, task, [("return_book", {"loan_id": "L012"})])
    info = evaluate(lib, task, log, ending="max_turns", solo=True)
    assert progress_reward(info) == 0.0


def test_episode_reward_names():
    info = RewardInfo(0.0, db_match=True, action_checks=[False])
    assert episode_reward("tau2", info) == 0.0
    assert episode_reward("progress", info) == 0.5
    with pytest.raises(ValueError, match="reward 'partial' is neither built in nor an import path"):
        episode_reward("partial", info)
    from memrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="env.reward: unknown reward 'partial'"):
        load_config(None, ["env.reward=partial"])
    with pytest.raises(ValueError, match="scores a graded tool-agent episode"):
        episode_reward("progress", None)  # a tool-agent reward needs the grade


def test_tool_agent_trains_on_progress_and_keeps_tau2_in_metrics():
    """env.reward=progress through the real workflow: an episode that stops after the look-ups of a
    three-step task is paid 2/4, and its tau2-bench reward (0) is kept in metrics."""
    import asyncio

    from memrl.config.schema import MemRLConfig
    from memrl.models.tiny import build_hf_tokenizer
    from memrl.testing.scripted import ScriptedEngine
    from memrl.workflows.common import encode_text
    from memrl.workflows.tool_agent import task_samples, tool_agent
    from memrl.text.tool_calls import render_call

    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent"}, "env": {"reward": "progress"}})
    sample = next(s for s in task_samples(cfg, None) if s.task.id == "return_email_1")
    assert sample.reward == "progress"
    tok = build_hf_tokenizer(["find_member_by_email get_member_details tool_call"], vocab_size=400)
    texts = [render_call(ToolCall("find_member_by_email", {"email": "kara.novak@example.org"})),
             render_call(ToolCall("get_member_details", {"member_id": "M011"})), "I found your loan."]
    end = tok.convert_tokens_to_ids("<|im_end|>")
    turns = iter(texts)
    engine = ScriptedEngine(lambda prompt, params: encode_text(tok, next(turns)) + [end])
    traj = asyncio.run(tool_agent(sample, engine, tok, cfg.workflow))
    assert traj.reward == 0.5
    assert traj.metrics["tau2_reward"] == 0.0 and traj.metrics["progress"] == 0.5
