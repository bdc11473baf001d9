"""tool_agent with workflow.tool_protocol=openai_chat against an OpenAI-compatible server on 127.0.0.1.

The server answers with scripted ``tool_calls``; the episode must be graded as the same actions
written as Hermes ``<tool_call>`` text in token mode, and what is sent must be valid OpenAI chat.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from memrl.config import ConfigError
from memrl.config.schema import MemRLConfig
from memrl.engines.openai import OpenAIEngine
from memrl.envs.messages import ToolCall
from memrl.envs.user_sim import ScriptedUser
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.tool_agent import TaskSample, task_samples, tool_agent
from memrl.text.tool_calls import render_call
from tests.engines.test_openai_chat import FakeChatServer, completion
from tests.workflows.test_tool_agent import Script


@pytest.fixture(scope="module")
def tok():
    return build_hf_tokenizer(["return_book loan_id member tool_call ###STOP### hello"], vocab_size=400)


def cfg(**wf: Any) -> MemRLConfig:
    return MemRLConfig.model_validate({"workflow": {"name": "tool_agent", **wf}})


def sample(task_id: str, **kw: Any) -> TaskSample:
    s = next(x for x in task_samples(cfg(), None) if x.task.id == task_id)
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def openai_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def run_chat(s: TaskSample, turns: list[dict[str, Any]], **wf: Any) -> tuple[Any, FakeChatServer]:
    """One chat-mode episode; the server's n-th answer is ``turns[n]`` (a message, or a full body)."""
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        turn = turns[min(len(srv.requests) - 1, len(turns) - 1)]
        return turn if "choices" in turn else completion(turn)

    with FakeChatServer(reply) as srv:
        eng = OpenAIEngine(srv.url, model="served", retries=0)
        config = cfg(tool_protocol="openai_chat", **wf).workflow

        async def go() -> Any:
            try:
                return await tool_agent(s, eng, None, config)
            finally:
                await eng.close()

        return asyncio.run(go()), srv


def without_ids(messages: list[dict[str, Any]], strip: bool = False) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        m = {**m, "call_id": "", "tool_calls": [{**c, "id": ""} for c in m["tool_calls"]]}
        if strip and m["content"]:
            m["content"] = m["content"].strip()
        out.append(m)
    return out


@pytest.mark.parametrize("task_id", ["return_email_1", "pay_fine_1", "checkout_title_1"])
def test_gold_tool_calls_over_chat_grade_as_in_token_mode(task_id, tok):
    s = sample(task_id)
    gold = s.task.evaluation_criteria.actions
    final = "All done. " + " ".join(s.task.evaluation_criteria.communicate_info or [])
    turns = [{"content": None, "tool_calls": [openai_call(f"srv_{i}", a.name, a.arguments)]}
             for i, a in enumerate(gold)] + [{"content": final}]
    traj, srv = run_chat(s, turns)
    assert traj.reward == 1.0 and traj.info["ending"] == "agent_stop"
    assert traj.metrics["tool_calls"] == len(gold) and traj.metrics["tool_call_validity"] == 1.0
    assert traj.conversations[0].num_tokens == 0  # chat mode has nothing to train on

    hermes = asyncio.run(tool_agent(s, Script(tok, [render_call(ToolCall(a.name, a.arguments)) for a in gold]
                                              + [final]).engine, tok, cfg().workflow))
    assert hermes.reward == 1.0
    # the chat log keeps the server's text verbatim (τ²-bench passes it on so); memrl's token mode strips it
    assert traj.info["messages"][-1]["content"] == final and hermes.info["messages"][-1]["content"] == final.strip()
    assert without_ids(traj.info["messages"], strip=True) == without_ids(hermes.info["messages"])
    # in the chat log every call carries the server's id and its result answers that id
    calls = [c for m in traj.info["messages"] for c in m["tool_calls"]]
    results = [m["call_id"] for m in traj.info["messages"] if m["role"] == "tool"]
    assert [c["id"] for c in calls] == results == [f"srv_{i}" for i in range(len(gold))]

    env = s.domain.new_env(solo=True)
    first, last = srv.requests[0], srv.requests[-1]
    assert first["tools"] == env.tool_schemas() and first["max_tokens"] == cfg().workflow.turn_tokens
    assert first["messages"] == [{"role": "system", "content": env.policy},
                                 {"role": "user", "content": s.task.first_message()}]
    # each request is the previous one + the assistant's calls as sent + one tool message per call
    tool_msgs = [m for m in last["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == [f"srv_{i}" for i in range(len(gold))]
    assistant = [m for m in last["messages"] if m["role"] == "assistant"]
    assert [m["tool_calls"] for m in assistant] == [t["tool_calls"] for t in turns[:-1]]
    for prev, nxt in zip(srv.requests, srv.requests[1:]):
        assert nxt["messages"][: len(prev["messages"])] == prev["messages"]


def test_malformed_arguments_are_an_invalid_call_shown_to_the_model():
    s = sample("return_1")
    loan = s.task.evaluation_criteria.actions[0].arguments["loan_id"]
    turns = [{"content": "Let me look.", "tool_calls": [openai_call("bad", "return_book", '{"loan_id": "L0'),
                                                        openai_call("ok", "search_books", {"query": "Copper Sky"})]},
             {"content": None, "tool_calls": [openai_call("c2", "return_book", {"loan_id": loan})]},
             {"content": "Returned."}]
    traj, srv = run_chat(s, turns)
    assert traj.reward == 1.0  # the invalid call is not part of the graded log
    assert traj.metrics["invalid_tool_calls"] == 1 and traj.metrics["tool_calls"] == 3
    first_turn = traj.info["messages"][1]
    assert first_turn["content"] == "Let me look." and [c["id"] for c in first_turn["tool_calls"]] == ["ok"]
    answered = [m for m in srv.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answered] == ["bad", "ok"]  # every call answered, in its order
    assert answered[0]["content"].startswith("Error: could not parse the arguments of tool call 'return_book'")
    assert not answered[1]["content"].startswith("Error")
    echoed = srv.requests[1]["messages"][2]["tool_calls"]
    assert echoed[0]["function"]["arguments"] == '{"loan_id": "L0'  # sent back as the model wrote it


def test_calls_go_back_as_tau2_writes_them_and_chat_omit_leaves_fields_out():
    """A parsed call's arguments go back re-written by json.dumps (τ²-bench's LLMAgent history), not as the
    model spaced them; chat_omit drops max_tokens and top_p from every request (what τ²-bench's agent sends)."""
    s = sample("return_1")
    loan = s.task.evaluation_criteria.actions[0].arguments["loan_id"]
    compact = '{"loan_id":"%s","note":"Zo\u00eb"}' % loan
    turns = [{"content": None, "tool_calls": [openai_call("c1", "return_book", compact)]}, {"content": "Returned."}]
    _, srv = run_chat(s, turns)
    echoed = srv.requests[1]["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert echoed == json.dumps({"loan_id": loan, "note": "Zoë"}) and echoed != compact
    assert all(r["max_tokens"] == 512 and r["top_p"] == 1.0 for r in srv.requests)
    _, srv = run_chat(s, turns, chat_omit=["max_tokens", "top_p"])
    assert all("max_tokens" not in r and "top_p" not in r and r["temperature"] == 1.0 for r in srv.requests)
    with pytest.raises(ValueError, match="chat_omit"):
        cfg(tool_protocol="openai_chat", chat_omit=["model"])


def test_a_call_without_an_id_gets_one_and_openai_style_json_text_parses():
    s = sample("return_1")
    loan = s.task.evaluation_criteria.actions[0].arguments["loan_id"]
    turns = [{"content": "", "tool_calls": [{"type": "function",
                                              "function": {"name": "return_book", "arguments": {"loan_id": loan}}}]},
             {"content": "Returned."}]
    traj, srv = run_chat(s, turns)
    assert traj.reward == 1.0
    call_id = traj.info["messages"][1]["tool_calls"][0]["id"]
    assert call_id and srv.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": call_id,
                                                           "content": traj.info["messages"][2]["content"]}


def test_user_turns_go_to_the_server_as_user_messages():
    loan = sample("return_1").task.evaluation_criteria.actions[0].arguments["loan_id"]
    said = iter(["I am returning a book.", "Thanks ###STOP###"])
    s = sample("return_1", solo=False, user=ScriptedUser(lambda task, messages: next(said)))
    traj, srv = run_chat(s, [{"content": None, "tool_calls": [openai_call("c", "return_book", {"loan_id": loan})]},
                             {"content": "It is returned."}])
    assert traj.reward == 1.0 and traj.info["ending"] == "user_stop"
    assert [m["role"] for m in srv.requests[0]["messages"]] == ["system", "assistant", "user"]
    assert srv.requests[-1]["messages"][-1]["role"] == "tool"
    assert traj.metrics["user_turns"] == 1


def test_context_limit_follows_the_servers_usage_count():
    s = sample("return_1")
    body = completion({"content": "hmm", "tool_calls": [openai_call("c", "search_books", {"query": "Copper Sky"})]},
                      usage={"prompt_tokens": 90, "completion_tokens": 20})
    traj, srv = run_chat(s, [body], max_total_tokens=100)
    assert traj.info["ending"] == "max_tokens" and traj.reward == 0.0
    assert len(srv.requests) == 1 and traj.metrics["response_tokens"] == 20


def test_chat_mode_needs_a_chat_engine_and_cannot_train(tmp_path):
    s = sample("return_1")
    with pytest.raises(ValueError, match="workflow.options.tool_protocol=openai_chat needs .*engine.kind=openai"):
        asyncio.run(tool_agent(s, ScriptedEngine(lambda p, k: []), None, cfg(tool_protocol="openai_chat").workflow))
    from memrl.train.preflight import check_config

    bad = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "tool_protocol": "openai_chat"},
                                      "trainer": {"output_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError, match="workflow.options.tool_protocol=openai_chat .*workflow.options.tool_protocol=tokens"):
        check_config(bad)


def test_eval_of_a_split_over_a_chat_server(tmp_path, tok):
    """memrl eval's tool-agent runner with engine.kind=openai: a server that plays each task's gold actions."""
    from memrl.engines.factory import build_engine
    from memrl.eval.tool_eval import run_tool_eval
    from memrl.workflows import load_samples

    usage = {"prompt_tokens": 1500, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 1024}}

    def play_gold(body: dict[str, Any]) -> dict[str, Any]:
        task = tasks[body["messages"][1]["content"]]
        done = sum(m["role"] == "assistant" for m in body["messages"])
        acts = task.evaluation_criteria.actions
        if done < len(acts):
            return completion({"content": None, "tool_calls": [openai_call(f"c{done}", acts[done].name,
                                                                           acts[done].arguments)]}, usage=usage)
        return completion({"content": " ".join(["Done."] + (task.evaluation_criteria.communicate_info or []))},
                          usage=usage)

    with FakeChatServer(play_gold) as srv:
        c = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "tool_protocol": "openai_chat"},
                                        "env": {"domain": "library", "eval_split": "test"},
                                        "engine": {"kind": "openai", "base_url": srv.url, "retries": 0}})
        tasks = {s.task.first_message(): s.task for s in load_samples(c, "eval")}
        eng = build_engine(c)

        async def go() -> dict[str, Any]:
            try:
                return await run_tool_eval(c, eng, tok, tmp_path / "out", 1)
            finally:
                await eng.close()

        res = asyncio.run(go())
    assert res["tasks"] == len(tasks) == 8 and res["pass_hat_k"] == {"1": 1.0}
    assert all(r["_path"] == "/v1/chat/completions" for r in srv.requests)
    n = len(srv.requests)  # every request answered with the usage above: the totals are n times it
    assert res["chat_usage"] == {"agent": {"requests": n, "prompt_tokens": 1500 * n, "cached_tokens": 1024 * n,
                                           "completion_tokens": 7 * n, "unreported": 0}}
    assert res["chat_cost_usd"] == {"agent": None}  # the served name is no model LiteLLM prices
    md = (tmp_path / "out" / "results.md").read_text()
    assert f"Chat requests of the finished trials: agent {n} requests, {1.5 * n:g}k prompt" in md


def test_memrl_eval_of_a_chat_api_model_needs_no_tokenizer(tmp_path):
    """``memrl eval --model gpt-4.1-2025-04-14`` over a chat server: no tokenizer by that name exists, none is
    loaded; the rollout records carry the messages and no token text."""
    import os
    import subprocess
    import sys

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return completion({"content": "I cannot help with that. ###STOP###"})

    with FakeChatServer(answer) as srv:
        r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "eval", "--workflow", "tool_agent",
                            "--domain", "library", "--split", "test", "--num-tasks", "2", "--engine", "openai",
                            "--base-url", srv.url, "--model", "gpt-4.1-2025-04-14", "--temperature", "0",
                            "--out", str(tmp_path / "o"), "workflow.options.tool_protocol=openai_chat",
                            "workflow.options.seeds=tau2", "workflow.options.max_errors=10",
                            "workflow.options.timeout_s=3600"],
                           capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert ("solo (no user) · NL assertions not judged · prompts memrl · seeds tau2 · ends at 30 turns, "
            "10 tool errors, 3600 s") in " ".join(r.stderr.split())
    assert json.loads((tmp_path / "o" / "results.json").read_text())["tasks"] == 2
    records = [json.loads(p.read_text()) for p in (tmp_path / "o" / "rollouts").rglob("*.jsonl")]
    assert len(records) == 2 and all("text" not in c for rec in records for c in rec["conversations"])
    assert all(b["model"] == "gpt-4.1-2025-04-14" for b in srv.requests)
    from memrl.view.loader import eval_tokenizer_spec

    assert eval_tokenizer_spec(tmp_path / "o") is None  # memrl view loads no tokenizer named gpt-4.1 either
