"""A command-mode agent finds the episode's endpoint under the names its SDK reads, and nothing else.

The anthropic SDK reads ``ANTHROPIC_BASE_URL`` (without ``/v1``) and ``ANTHROPIC_API_KEY`` /
``ANTHROPIC_AUTH_TOKEN``; LangChain's ``ChatOpenAI`` prefers ``OPENAI_API_BASE`` to
``OPENAI_BASE_URL``. A CLI agent written with either runs unchanged, even when the trainer's
own environment points those names at a real provider.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from memrl.engines.base import SamplingParams
from memrl.gateway.command import sdk_environment
from memrl.gateway.workflow import AgentWorkflow
from memrl.workflows.api import chat_ids
from tests.gateway.test_protocols import CHAT_TOOLS, FINAL, prompt_ids, tool_then_text

CLAUDE_CLI = """
import json, os, sys
import anthropic
sample = json.load(sys.stdin)
claude = anthropic.Anthropic(max_retries=0)  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY from the environment
tools = [{"name": "add", "description": "a + b", "input_schema": %s}]
messages = [{"role": "user", "content": sample["question"]}]
r = claude.messages.create(model=os.environ["MEMRL_MODEL"], max_tokens=64, messages=messages, tools=tools)
use = next(b for b in r.content if b.type == "tool_use")
messages += [{"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                           "content": str(use.input["a"] + use.input["b"])}]}]
r = claude.messages.create(model="claude-any", max_tokens=64, messages=messages, tools=tools)
print(json.dumps({"reward": float(r.content[0].text == %r), "metrics": {"tool_calls": 1}}))
"""

LANGCHAIN_CLI = """
import json, sys
from langchain_openai import ChatOpenAI
sample = json.load(sys.stdin)
reply = ChatOpenAI(model="any", max_tokens=64, max_retries=0).invoke(sample["question"])  # endpoint from env
print(json.dumps({"reward": float("add" in reply.content)}))
"""

# What a user's shell may hold: a real provider's endpoint and keys, which must not reach the command.
REAL = {"ANTHROPIC_BASE_URL": "https://api.anthropic.com", "ANTHROPIC_API_KEY": "sk-ant-real",
        "ANTHROPIC_AUTH_TOKEN": "real-token", "OPENAI_API_BASE": "https://api.openai.com/v1"}


def run_command_episode(gateway, tok, script: str) -> object:
    wf = AgentWorkflow(command=[sys.executable, script], timeout_s=60, merge=False)  # one conversation per call
    return asyncio.run(wf.episode({"question": "1 + 2?"}, engine=tool_then_text(tok), tokenizer=tok,
                                  sampling=SamplingParams(seed=1), services={"gateway": gateway}))


def test_an_anthropic_sdk_command_runs_unchanged(gateway, tools_tokenizer, tmp_path, monkeypatch):
    pytest.importorskip("anthropic", reason="pip install 'memrl[dev]'")
    for name, value in REAL.items():
        monkeypatch.setenv(name, value)
    script = tmp_path / "claude_cli.py"
    script.write_text(CLAUDE_CLI % (CHAT_TOOLS[0]["function"]["parameters"], FINAL))
    traj = run_command_episode(gateway, tools_tokenizer, str(script))
    assert traj.reward == 1.0 and traj.metrics["tool_calls"] == 1 and traj.num_conversations == 2
    first, second = traj.conversations
    use = second.meta["messages"][1]["tool_calls"][0]
    assert use["function"] == {"name": "add", "arguments": {"a": 1, "b": 2}}
    user = {"role": "user", "content": "1 + 2?"}
    assert prompt_ids(first) == chat_ids(tools_tokenizer, [user], CHAT_TOOLS)
    history = [user, {"role": "assistant", "content": "", "tool_calls": [use]},
               {"role": "tool", "tool_call_id": use["id"], "content": "3"}]
    assert prompt_ids(second) == chat_ids(tools_tokenizer, history, CHAT_TOOLS)


def test_a_langchain_command_ignores_a_stale_openai_api_base(gateway, tools_tokenizer, tmp_path, monkeypatch):
    pytest.importorskip("langchain_openai", reason="pip install 'memrl[dev]'")
    monkeypatch.setenv("OPENAI_API_BASE", REAL["OPENAI_API_BASE"])
    script = tmp_path / "langchain_cli.py"
    script.write_text(LANGCHAIN_CLI)
    traj = run_command_episode(gateway, tools_tokenizer, str(script))
    assert traj.reward == 1.0 and traj.num_conversations == 1  # the tool call's text, as no tools were bound


def test_sdk_environment_names():
    env = sdk_environment({"OPENAI_BASE_URL": "http://127.0.0.1:9/episodes/e1/v1", "OPENAI_API_KEY": "sk-ep-1",
                           **REAL})
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9/episodes/e1"
    assert env["ANTHROPIC_API_KEY"] == env["ANTHROPIC_AUTH_TOKEN"] == "sk-ep-1"
    assert env["OPENAI_API_BASE"] == "http://127.0.0.1:9/episodes/e1/v1"
    assert sdk_environment({"PATH": "/bin"}) == {"PATH": "/bin"}
