"""``memrl eval --workflow tool_agent``: K trials per task, pass^k, resumable, readable transcripts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from memrl.config.schema import MemRLConfig
from memrl.eval.runner import check_resume
from memrl.eval.tool_eval import aggregate_tool_eval, run_tool_eval, task_folder, trial_seeds
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.common import encode_text
from memrl.workflows import load_samples


def cfg() -> MemRLConfig:
    return MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "max_turns": 2},
                                       "env": {"domain": "library", "eval_split": "test"},
                                       "sampling": {"temperature": 1.0}})


def test_trials_pass_hat_k_resume_and_transcripts(tmp_path):
    tok = build_hf_tokenizer(["Nothing to change here."], vocab_size=400)
    calls = []

    def reply(prompt, params):  # never calls a tool: only tasks where changing nothing is right succeed
        calls.append(params.seed)
        return encode_text(tok, "Nothing to change here.") + [tok.convert_tokens_to_ids("<|im_end|>")]

    c = cfg()
    out = tmp_path / "out"
    check_resume(out, c)
    res = asyncio.run(run_tool_eval(c, ScriptedEngine(reply), tok, out, 3))
    tasks = load_samples(c, "eval")
    assert res["tasks"] == len(tasks) == res["complete_tasks"] and res["trials"] == 3
    assert len(calls) == 3 * len(tasks) and len(set(calls)) == 3  # one seed per trial
    per_task = res["per_task"]
    solved = [t for t, v in per_task.items() if v["successes"] == 3]
    assert 0 < len(solved) < len(tasks) and all(v["successes"] in (0, 3) for v in per_task.values())
    # outcomes are the same in every trial, so every pass^k equals the share of solved tasks
    assert res["pass_hat_k"] == {str(k): len(solved) / len(tasks) for k in (1, 2, 3)}
    text = (out / "transcripts" / task_folder(solved[0]) / "0.txt").read_text()
    assert text.startswith(f"# task {solved[0]} · trial 0") and "[agent] Nothing to change here." in text
    assert "| pass^1 | pass^2 | pass^3 |" in (out / "results.md").read_text()
    # a second run finds every trial done and runs nothing
    asyncio.run(run_tool_eval(c, ScriptedEngine(reply), tok, out, 3))
    assert len(calls) == 3 * len(tasks)


def test_failed_trials_are_left_out_of_pass_hat_k_as_tau2_leaves_out_infrastructure_errors(tmp_path):
    """τ²-bench's metrics: pass^k over every task with a finished trial, k up to the fewest finished."""
    c = cfg()
    out = tmp_path / "out"
    ids = ["t1", "t/2"]
    outcomes = {"t1": [1.0, 0.0, 1.0], "t/2": [1.0, 1.0]}
    for task, rewards in outcomes.items():
        for t, r in enumerate(rewards):
            path = out / "episodes" / task_folder(task) / f"{t}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"task_id": task, "trial": t, "reward": r, "info": {"nl_unchecked": 1}}))
    (out / "failures" / task_folder("t/2")).mkdir(parents=True)
    (out / "failures" / task_folder("t/2") / "2.json").write_text("{}")
    res = aggregate_tool_eval(c, out, ids, 3)
    assert res["complete_tasks"] == 1 and res["failed_trials"] == 1
    # t1: C(2,k)/C(3,k) = 2/3, 1/3; t/2 (two trials, both solved): 1, 1; k stops at 2
    assert res["pass_hat_k"] == pytest.approx({"1": 5 / 6, "2": 2 / 3})
    assert res["avg_reward"] == 4 / 5 and res["nl_assertions_unchecked"] == 5
    assert task_folder("t/2") != "t_2" and task_folder("t1") == "t1"


def test_cli_runs_tool_eval_with_the_tiny_model(tmp_path):
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "eval", "--model", "tiny", "--workflow", "tool_agent",
                        "--domain", "library", "--split", "test", "--trials", "2", "--temperature", "1",
                        "--out", tmp_path / "o", "workflow.max_turns=1", "workflow.turn_tokens=8",
                        "env.partial_credit=true"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| pass^1 | pass^2 |" in r.stdout
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert results["trials"] == 2 and results["domain"] == "library" and results["split"] == "test"
    # a training reward setting is not what the eval scores: τ²-bench's all-or-nothing reward is
    assert "env.partial_credit=true are training rewards and are not used here" in r.stderr
    assert all(rew in (0.0, 1.0) for t in results["per_task"].values() for rew in t["rewards"])


def test_task_ids_and_num_tasks_narrow_the_eval_split_as_tau2_does(tmp_path):
    """τ²-bench's --task-ids (split order kept, every id must exist) then --num-tasks; training is not narrowed."""
    from memrl.workflows.tool_agent import pick_tasks

    every = load_samples(cfg(), "eval")
    ids = [s.task.id for s in every]
    picked = load_samples(cfg().model_copy(update={"env": cfg().env.model_copy(
        update={"task_ids": [ids[3], ids[1], ids[2]], "num_tasks": 2})}), "eval")
    assert [s.task.id for s in picked] == [ids[1], ids[2]]  # the split's order, then the first two
    narrowed = cfg().env.model_copy(update={"num_tasks": 1})
    assert len(load_samples(cfg().model_copy(update={"env": narrowed}), "train")) > 1  # the training split is whole
    tasks = [s.task for s in every]
    assert pick_tasks(tasks, None, None, "test") == tasks
    try:
        pick_tasks(tasks, [ids[0], "nope"], None, "test")
    except ValueError as err:
        assert str(err) == "env.task_ids: split 'test' has no task nope"
    else:
        raise AssertionError("a missing id must be refused")
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "eval", "--model", "tiny", "--workflow", "tool_agent",
                        "--domain", "library", "--split", "test", "--task-ids", f"{ids[0]},{ids[4]}", "--num-tasks", "1",
                        "--out", tmp_path / "o", "workflow.max_turns=1", "workflow.turn_tokens=8"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    narrowed = json.loads((tmp_path / "o" / "results.json").read_text())
    assert narrowed["tasks"] == 1 and narrowed["subset"] is True  # the leaderboard view flags it
    from memrl.eval.tool_eval import _is_subset

    whole = cfg().model_copy(update={"env": cfg().env.model_copy(update={"num_tasks": len(ids)})})
    assert not _is_subset(whole, len(ids))  # --num-tasks at the split's size leaves nothing out


def test_task_ids_flag_keeps_telecoms_bracketed_ids_whole():
    """Telecom's ids ("[mobile_data_issue]a|b[PERSONA:None]") and numeric ids reach env.task_ids as given."""
    from memrl.cli.common import resolve_config

    ids = ["[mobile_data_issue]data_mode_off|data_usage_exceeded[PERSONA:None]", "12", "Zoë's task"]
    assert resolve_config(None, [], {"env.task_ids": ids}).env.task_ids == ids


def test_a_tool_eval_where_every_trial_failed_says_why(tmp_path):
    """The error names the first failure's cause (it said only where the failures were written)."""
    import pytest

    from memrl.engines.base import EngineError
    from memrl.eval.runner import AllEpisodesFailedError

    def refuse(prompt, params):
        raise EngineError("HTTP 400 from http://x/v1/completions: temperature unsupported")

    tok = build_hf_tokenizer(["x"], vocab_size=300)
    with pytest.raises(AllEpisodesFailedError, match=r"all 8 trials failed \(see .*failures/\); the first: "
                                                     r"memrl.engines.base.EngineError: HTTP 400 .*temperature"):
        asyncio.run(run_tool_eval(cfg(), ScriptedEngine(refuse), tok, tmp_path / "out", 1))


def test_tau2_seeds_send_tau2_benchs_trial_seed_on_every_call(tmp_path):
    """τ²-bench's batch runner: random.seed(300), then one randint(0, 10^6) per trial (values from CPython's
    Mersenne Twister, the stream random.seed(300) gives on every platform); each trial's seed on every call."""
    assert trial_seeds(300, 4, "tau2") == [626729, 373753, 361454, 1567]
    assert trial_seeds(300, 2) == [300, 8219]
    tok = build_hf_tokenizer(["Let me look.", "Nothing to change here."], vocab_size=400)
    calls: list[tuple[int, int]] = []

    def reply(prompt, params):  # a lookup first, then text: two agent calls per trial
        calls.append(params.seed)
        text = ('<tool_call>{"name": "search_books", "arguments": {"query": "x"}}</tool_call>' if len(calls) % 2
                else "Nothing to change here.")
        return encode_text(tok, text) + [tok.convert_tokens_to_ids("<|im_end|>")]

    def config(seeds: str) -> MemRLConfig:
        options = {"max_turns": 2, "seeds": seeds}
        return MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "options": options},
                                           "env": {"domain": "library", "eval_split": "test", "num_tasks": 1},
                                           "sampling": {"temperature": 1.0, "seed": 300}})

    c = config("tau2")
    out = tmp_path / "out"
    asyncio.run(run_tool_eval(c, ScriptedEngine(reply), tok, out, 2))
    assert calls == [626729, 626729, 373753, 373753]
    task = load_samples(c, "eval")[0].task.id
    assert json.loads((out / "episodes" / task_folder(task) / "1.json").read_text())["seed"] == 373753
    sims = json.loads((out / "tau2_results.json").read_text())["simulations"]
    assert sorted(s["seed"] for s in sims) == [373753, 626729]
    calls.clear()  # memrl's: each call its own
    asyncio.run(run_tool_eval(config("memrl"), ScriptedEngine(reply), tok, tmp_path / "memrl", 1))
    assert len(calls) == 2 and calls[0] != calls[1]


def test_results_md_says_what_the_chat_requests_cost():
    from memrl.eval.tool_eval import tool_results_markdown

    usage = {"requests": 2, "prompt_tokens": 3000, "cached_tokens": 0, "completion_tokens": 40, "unreported": 0}
    results = {"model": "gpt-4.1", "domain": "retail", "split": "base", "trials": 1, "solo": False, "tasks": 1,
               "complete_tasks": 1, "failed_trials": 0, "avg_reward": 1.0, "pass_hat_k": {"1": 1.0},
               "nl_assertions_unchecked": 0, "endings": {}, "per_task": {},
               "chat_usage": {"agent": usage, "user": usage, "judge": usage},
               "chat_cost_usd": {"agent": 0.00632, "user": 0.00632, "judge": None}}
    md = tool_results_markdown(results)
    assert ("Chat requests of the finished trials: agent 2 requests, 3k prompt + 40 completion tokens; user 2 "
            "requests, 3k prompt + 40 completion tokens; judge 2 requests, 3k prompt + 40 completion tokens. "
            "Cost at LiteLLM's prices: $0.0126 (agent $0.0063, user $0.0063; judge not priced).") in md
    results["chat_cost_usd"] = {"agent": None, "user": None, "judge": None}
    assert "Cost" not in tool_results_markdown(results)


def test_a_failing_trial_is_tried_again_then_recorded_as_tau2s_infrastructure_error(tmp_path):
    """eval.max_retries: τ²-bench's run_with_retry (same seed each try); still failing, the trial is written to
    failures/ and to tau2_results.json as an infrastructure_error run, and left out of the metrics."""
    tok = build_hf_tokenizer(["Nothing to change here."], vocab_size=400)
    calls = []

    def reply(prompt, params):
        calls.append(params.seed)
        if 2 <= len(calls) <= 4:  # the second trial's three tries fail, each at its first request
            raise RuntimeError("server hung up")
        return encode_text(tok, "Nothing to change here.") + [tok.convert_tokens_to_ids("<|im_end|>")]

    c = cfg().model_copy(update={"eval": cfg().eval.model_copy(update={"max_retries": 2, "retry_delay_s": 0}),
                                 "engine": cfg().engine.model_copy(update={"concurrency": 1})})
    samples = load_samples(c, "eval")
    out = tmp_path / "out"
    res = asyncio.run(run_tool_eval(c, ScriptedEngine(reply), tok, out, 1))
    assert calls[1] == calls[2] == calls[3]  # each try of a trial sends what the first sent (its seed)
    assert res["failed_trials"] == 1 and sum(t["trials"] for t in res["per_task"].values()) == len(samples) - 1
    failed = json.loads(next((out / "failures").rglob("0.json")).read_text())
    assert failed["attempts"] == 3 and failed["error"] == "RuntimeError: server hung up"
    sims = json.loads((out / "tau2_results.json").read_text())["simulations"]
    infra = [x for x in sims if x["termination_reason"] == "infrastructure_error"]
    assert len(sims) == len(samples) and len(infra) == 1
    assert infra[0]["messages"] == [] and infra[0]["reward_info"] is None
    assert infra[0]["info"] == {"error": "RuntimeError: server hung up", "error_type": "RuntimeError",
                                "failed_after_attempts": 3}
    res = asyncio.run(run_tool_eval(c, ScriptedEngine(reply), tok, out, 1))  # the next run: its fourth try passes
    assert res["failed_trials"] == 0 and not list((out / "failures").rglob("*.json"))


def test_a_folder_evaluated_before_an_option_existed_resumes_at_its_default(tmp_path):
    import yaml

    c = cfg()
    out = tmp_path / "out"
    check_resume(out, c)
    (out / "episodes").mkdir()
    (out / "episodes" / "x.json").write_text("{}")
    recorded = yaml.safe_load((out / "eval_config.yaml").read_text())
    del recorded["workflow"]["options"]["invalid_messages"], recorded["env"]["solo"]  # an older memrl's record
    (out / "eval_config.yaml").write_text(yaml.safe_dump(recorded))
    check_resume(out, c)  # the new settings at their defaults: the same run
    changed = MemRLConfig.model_validate({**c.model_dump(), "workflow": {"name": "tool_agent", "max_turns": 2,
                                                                         "invalid_messages": "tau2"}})
    with pytest.raises(Exception, match="changed: workflow.options"):
        check_resume(out, changed)


def test_a_run_whose_every_trial_sent_an_invalid_message_still_writes_its_results(tmp_path):
    """τ²-bench's infrastructure errors are an outcome of the model there, not a broken setup: results are
    written (no trial scored) instead of the all-failed error."""
    tok = build_hf_tokenizer(["Nothing to change here."], vocab_size=400)
    c = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "max_turns": 2, "invalid_messages": "tau2"},
                                    "env": {"domain": "library", "eval_split": "test"}})
    out = tmp_path / "out"
    empty = ScriptedEngine(lambda prompt, params: [tok.convert_tokens_to_ids("<|im_end|>")])
    res = asyncio.run(run_tool_eval(c, empty, tok, out, 1))
    assert res["failed_trials"] == res["tasks"] and res["avg_reward"] is None and res["pass_hat_k"] == {}
    sims = json.loads((out / "tau2_results.json").read_text())["simulations"]
    assert {s["termination_reason"] for s in sims} == {"infrastructure_error"}
