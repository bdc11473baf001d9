"""The τ²-bench leaderboard's view of a tool-agent eval: per-domain pass^1..4 in percent and Overall,
and each domain's episodes as τ²-bench's own results file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from memrl.config.schema import MemRLConfig
from memrl.eval.leaderboard import leaderboard, leaderboard_markdown


def results(domain: str, pass_hat_k: dict[str, float], tasks: int = 20) -> dict:
    return {"domain": domain, "model": "m", "split": "base", "trials": len(pass_hat_k), "tasks": tasks,
            "complete_tasks": tasks, "pass_hat_k": pass_hat_k, "nl_assertions_unchecked": 0}


def test_overall_is_the_plain_mean_of_the_domains_in_percent():
    board = leaderboard({
        "retail": results("retail", {"1": 0.8, "2": 0.7, "3": 0.65, "4": 0.6}),
        "airline": results("airline", {"1": 0.5, "2": 0.4, "3": 0.3, "4": 0.25}),
        "telecom": results("telecom", {"1": 0.2, "2": 0.1, "3": 0.05, "4": 0.0}),
    })
    assert board["results"]["airline"] == {"pass_1": 50.0, "pass_2": 40.0, "pass_3": 30.0, "pass_4": 25.0}
    assert board["overall"] == pytest.approx({"pass_1": 50.0, "pass_2": (70 + 40 + 10) / 3,
                                              "pass_3": (65 + 30 + 5) / 3, "pass_4": (60 + 25 + 0) / 3})
    assert board["overall_domains"] == ["retail", "airline", "telecom"] and board["note"] == ""
    md = leaderboard_markdown(board)
    assert "| **Overall** (retail, airline, telecom) | | 50.0 | 40.0 | 33.3 | 28.3 |" in md
    # τ³'s banking_knowledge joins the mean when evaluated; other domains never do; pass^5+ is not a column
    board = leaderboard({
        "retail": results("retail", {"1": 0.8}), "airline": results("airline", {"1": 0.5}),
        "telecom": results("telecom", {"1": 0.2}), "banking_knowledge": results("banking_knowledge", {"1": 0.1}),
        "mock": results("mock", {"1": 1.0}),
    })
    assert board["overall"] == pytest.approx({"pass_1": (80 + 50 + 20 + 10) / 4})
    assert leaderboard({"airline": results("airline", {str(k): 0.5 for k in range(1, 7)})})["results"][
        "airline"] == {f"pass_{k}": 50.0 for k in range(1, 5)}


def test_overall_averages_the_leaderboard_domains_present_and_says_so():
    """τ²-bench's leaderboard script (get_top_models_overall) averages the domains a submission has."""
    board = leaderboard({"airline": results("airline", {"1": 0.5}), "retail": results("retail", {"1": 0.3})})
    assert board["overall"] == pytest.approx({"pass_1": 40.0}) and board["overall_domains"] == ["retail", "airline"]
    assert board["note"].startswith("Overall averages retail, airline only") and "also have telecom" in board["note"]
    md = leaderboard_markdown(board)
    assert "| **Overall** (retail, airline) | | 40.0 |" in md and board["note"] in md
    assert leaderboard({"mock": results("mock", {"1": 1.0})})["overall"] is None  # no leaderboard domain
    # domains run with different trial counts: each pass^k over the domains that have it, as τ²-bench's script
    uneven = leaderboard({"retail": results("retail", {"1": 0.6, "2": 0.5}), "airline": results("airline", {"1": 0.4})})
    assert uneven["overall"] == pytest.approx({"pass_1": 50.0, "pass_2": 50.0})


def test_a_subset_of_the_split_is_flagged():
    part = {**results("airline", {"1": 0.5}, tasks=2), "subset": True}
    board = leaderboard({"airline": part, "retail": results("retail", {"1": 0.3}),
                         "telecom": results("telecom", {"1": 0.1})})
    assert board["note"] == ("airline: a subset of the split's tasks (env.task_ids / env.num_tasks), not comparable "
                             "with the leaderboard, which runs every task")


MINI = {"airline": ["0", "8"], "retail": ["10", "0"]}  # one task each that needs no change, one that needs a write


def mini_data(tau2_dir: Path, root: Path) -> Path:
    """The three domains' files with a split 'mini' of two tasks each (the data stays in ../shared)."""
    for domain in ("airline", "retail", "telecom"):
        src, dst = tau2_dir / domain, root / domain
        dst.mkdir(parents=True)
        for f in src.iterdir():
            if f.name != "split_tasks.json":
                (dst / f.name).symlink_to(f)
        ids = MINI.get(domain) or [t["id"] for t in json.loads((src / "tasks.json").read_text())[:2]]
        (dst / "split_tasks.json").write_text(json.dumps({"mini": ids}))
    return root


def test_three_domains_each_get_a_folder_a_tau2_results_file_and_the_overall(tmp_path, tau2_dir, monkeypatch):
    """A user who hangs up at once: the agent changes nothing, so airline 0 and retail 10 pass, airline 8,
    retail 0 and both telecom tasks fail, in every trial: pass^k 50, 50 and 0, Overall 33.3."""
    import memrl.engines.factory
    import memrl.models.resolve
    import memrl.workflows.tool_agent as tool_agent
    from memrl.cli.eval_tools import eval_tools
    from memrl.envs.user_sim import LLMUserSimulator
    from memrl.models.tiny import build_hf_tokenizer
    from memrl.testing.scripted import ScriptedEngine
    from memrl.workflows.common import encode_text

    tok = build_hf_tokenizer(["###STOP###"], vocab_size=400)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    hang_up = ScriptedEngine(lambda p, k: encode_text(tok, "###STOP###") + [end])
    monkeypatch.setattr(memrl.engines.factory, "build_engine", lambda cfg: ScriptedEngine(lambda p, k: [end]))
    monkeypatch.setattr(memrl.models.resolve, "load_tokenizer", lambda name, **kw: tok)
    monkeypatch.setattr(tool_agent, "build_user_simulator", lambda cfg: LLMUserSimulator(hang_up, tok))
    cfg = MemRLConfig.model_validate({
        "model": {"path": "scripted"}, "workflow": {"name": "tool_agent", "max_total_tokens": 10_000_000},
        "env": {"domain": "airline", "data_dir": str(mini_data(tau2_dir, tmp_path / "tau2")), "eval_split": "mini",
                "solo": False, "user_model": "scripted"},
        "sampling": {"temperature": 1.0}})
    out = tmp_path / "out"
    eval_tools(cfg, out, 2, False, Console(quiet=True), rollouts=False, domains=["airline", "retail", "telecom"])

    board = json.loads((out / "leaderboard.json").read_text())
    assert board["results"] == {"airline": {"pass_1": 50.0, "pass_2": 50.0}, "retail": {"pass_1": 50.0, "pass_2": 50.0},
                                "telecom": {"pass_1": 0.0, "pass_2": 0.0}}
    assert board["overall"] == pytest.approx({"pass_1": 100 / 3, "pass_2": 100 / 3})
    assert "| **Overall** (retail, airline, telecom) | | 33.3 | 33.3 |" in (out / "leaderboard.md").read_text()
    for domain in ("airline", "retail", "telecom"):
        per = json.loads((out / domain / "results.json").read_text())
        assert per["domain"] == domain and per["complete_tasks"] == 2
    doc = json.loads((out / "airline" / "tau2_results.json").read_text())
    assert doc["info"]["num_trials"] == 2 and doc["info"]["environment_info"]["domain_name"] == "airline"
    assert doc["info"]["agent_info"]["implementation"] == "llm_agent"
    assert doc["info"]["user_info"]["implementation"] == "user_simulator"
    assert [t["id"] for t in doc["tasks"]] == ["0", "8"]
    sims = {(s["task_id"], s["trial"]): s for s in doc["simulations"]}
    assert sorted(sims) == [("0", 0), ("0", 1), ("8", 0), ("8", 1)]
    first = sims[("0", 0)]
    assert first["termination_reason"] == "user_stop" and first["reward_info"]["reward"] == 1.0
    assert first["reward_info"]["db_check"] == {"db_match": True, "db_reward": 1.0}
    assert [m["role"] for m in first["messages"]] == ["assistant", "user"]
    assert first["messages"][1]["content"] == "###STOP###" and first["messages"][0]["tool_calls"] is None
    assert sims[("8", 1)]["reward_info"]["reward_breakdown"] == {"DB": 0.0, "COMMUNICATE": 1.0}


def test_an_episode_as_a_tau2_simulation():
    """Calls get the ids of the results that answer them (τ² pairs them by id); in solo mode the ticket is
    not a message; memrl's endings map to τ²'s termination reasons."""
    from memrl.eval.tau2_results import tau2_simulation
    from memrl.envs.tasks import Task

    task = Task.model_validate({"id": "7", "evaluation_criteria": {"actions": [], "reward_basis": ["DB"]}})
    record = {"task_id": "7", "trial": 1, "reward": 0.0, "seconds": 2.5, "info": {
        "ending": "max_turns", "reward_breakdown": {"DB": 0.0}, "note": "", "messages": [
            {"role": "user", "content": "My ticket", "tool_calls": []},
            {"role": "assistant", "content": None, "tool_calls": [
                {"name": "a", "arguments": {"x": 1}, "id": "", "requestor": "assistant"},
                {"name": "b", "arguments": {}, "id": "", "requestor": "assistant"}]},
            {"role": "tool", "content": "ok", "call_id": "call_1", "requestor": "assistant", "error": False},
            {"role": "tool", "content": "Error: no", "call_id": "call_2", "requestor": "assistant", "error": True}]}}
    sim = tau2_simulation(record, task, "2025-01-01T00:00:00", solo=True)
    assert sim["id"] == "7/1" and sim["trial"] == 1 and sim["duration"] == 2.5
    assert sim["termination_reason"] == "max_steps"
    assert sim["reward_info"] == {"reward": 0.0, "reward_breakdown": {"DB": 0.0}, "reward_basis": ["DB"], "info": None,
                                  "db_check": {"db_match": False, "db_reward": 0.0}}
    first, a, b = sim["messages"]
    assert first["role"] == "assistant" and [c["id"] for c in first["tool_calls"]] == ["call_1", "call_2"]
    assert (a["id"], a["role"], a["error"], b["id"], b["error"]) == ("call_1", "tool", False, "call_2", True)
    assert tau2_simulation(record, task, "t", solo=False)["messages"][0]["content"] == "My ticket"
    assert (sim["agent_cost"], sim["user_cost"]) == (None, None)  # no chat requests: nothing to price
    for ending, reason in (("max_steps", "max_steps"), ("too_many_errors", "too_many_errors"),
                           ("timeout", "timeout"), ("user_error", "user_error"), ("agent_error", "agent_error")):
        record["info"]["ending"] = ending
        assert tau2_simulation(record, task, "t", solo=True)["termination_reason"] == reason


def test_a_simulations_costs_are_its_agent_and_user_tokens_at_litellms_prices(monkeypatch):
    import sys
    import types

    from memrl.eval.tau2_results import tau2_simulation
    from memrl.envs.tasks import Task

    prices = {"gpt-x": 1e-6}
    fake = types.SimpleNamespace(model_cost=prices, cost_per_token=lambda model, prompt_tokens, completion_tokens,
                                 cache_read_input_tokens: (prompt_tokens * prices[model], 2 * completion_tokens * 1e-6))
    monkeypatch.setitem(sys.modules, "litellm", fake)
    task = Task.model_validate({"id": "7", "evaluation_criteria": {"actions": [], "reward_basis": ["DB"]}})
    metrics = {"agent_requests": 2, "agent_prompt_tokens": 1000, "agent_cached_tokens": 0,
               "agent_completion_tokens": 50, "agent_unreported": 0, "user_requests": 1, "user_prompt_tokens": 300,
               "user_cached_tokens": 0, "user_completion_tokens": 5, "user_unreported": 0}
    record = {"task_id": "7", "trial": 0, "reward": 1.0, "metrics": metrics,
              "info": {"ending": "user_stop", "messages": []}}
    sim = tau2_simulation(record, task, "t", solo=False, models={"agent": "gpt-x", "user": "local-model"})
    assert sim["agent_cost"] == 1000e-6 + 100e-6 and sim["user_cost"] is None  # the user's model has no price
    solo = {k: v for k, v in metrics.items() if k.startswith("agent_")}
    sim = tau2_simulation({**record, "metrics": solo}, task, "t", solo=True, models={"agent": "gpt-x"})
    assert (sim["agent_cost"], sim["user_cost"]) == (1000e-6 + 100e-6, 0.0)  # no user: it cost nothing, as in τ²


def test_a_bad_domain_in_the_list_is_one_line_before_anything_runs(tmp_path):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    for domains, text in (("library,hotel", "error: --domain hotel: unknown domain 'hotel'"),
                          ("library,library", "error: --domain names a domain twice: library,library")):
        r = CliRunner().invoke(app, ["eval", "--workflow", "tool_agent", "--model", "tiny", "--domain", domains,
                                     "--out", str(tmp_path / "out")])
        lines = [x for x in r.output.strip().splitlines() if x.startswith("error:")]
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(text), r.output
        assert not (tmp_path / "out" / "leaderboard.json").exists()
