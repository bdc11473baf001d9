"""The agent workflow runs a program per episode; whatever the program does wrong fails only its episode."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from memrl.engines.base import SamplingParams
from memrl.gateway.program import AgentProgramError
from memrl.gateway.workflow import AgentWorkflow
from memrl.testing.scripted import ScriptedEngine

P = "tests.gateway.programs"


def episode(gateway, tok, sample=None, **options):
    wf = AgentWorkflow(**options)
    engine = ScriptedEngine(lambda prompt, params: tok.encode(" fine", add_special_tokens=False) + [tok.eos_token_id])
    return asyncio.run(wf.episode(sample or {"doc": "d", "gold": "yes"}, engine=engine, tokenizer=tok,
                                  sampling=SamplingParams(seed=1), services={"gateway": gateway}))


def test_two_calls_make_two_conversations_and_the_reward(gateway, tools_tokenizer):
    traj = episode(gateway, tools_tokenizer, program=f"{P}:two_calls")
    assert traj.reward == 1.0 and traj.num_conversations == 2
    assert traj.metrics["model_calls"] == 2 and traj.metrics["summary_chars"] == len(" fine")
    first, second = traj.conversations
    assert first.meta["messages"][0]["content"] == "Summarise: d"
    assert second.meta["messages"][1]["content"] == "Notes:  fine"
    assert len(gateway.sessions) == 0  # the episode's endpoint is closed


@pytest.mark.parametrize("program,message", [
    ("raises", "raised KeyError: 'no such field' (at "),
    ("never_calls", "returned without calling the model"),
    ("loops", "made more than 3 model calls in one episode (workflow.options.max_calls)"),
    ("loops_quietly", "made more than 3 model calls in one episode (workflow.options.max_calls)"),
    ("says_yes", "returned reward 'yes' (str): the reward must be a number"),
    ("nan_reward", "returned reward nan: it must be a finite number"),
    ("nan_metric", "returned metric 'f1' inf: it must be a finite number"),
])
def test_a_failing_program_fails_its_episode_only(gateway, tools_tokenizer, program, message):
    with pytest.raises(AgentProgramError) as err:
        episode(gateway, tools_tokenizer, program=f"{P}:{program}", max_calls=3)
    assert message in str(err.value) and f"program {P}:{program}" in str(err.value)
    assert episode(gateway, tools_tokenizer, program=f"{P}:two_calls").reward == 1.0  # the gateway goes on


def test_a_numpy_reward_and_metric_are_numbers(gateway, tools_tokenizer):
    traj = episode(gateway, tools_tokenizer, program=f"{P}:numpy_reward")
    assert traj.reward == 0.25 and traj.metrics["hits"] == 3.0 and type(traj.reward) is float


def test_a_hanging_program_times_out(gateway, tools_tokenizer):
    start = time.perf_counter()
    with pytest.raises(AgentProgramError, match=r"did not finish within 0.5 s \(workflow.options.timeout_s\)"):
        episode(gateway, tools_tokenizer, program=f"{P}:hangs", timeout_s=0.5)
    assert time.perf_counter() - start < 5 and len(gateway.sessions) == 0


def test_options_are_checked_in_one_line():
    with pytest.raises(ValueError, match="exactly one of workflow.options.program"):
        AgentWorkflow()
    with pytest.raises(ValueError, match="must be an async function"):
        AgentWorkflow(program=f"{P}:not_async")
    with pytest.raises(ValueError, match="has no attribute nope"):
        AgentWorkflow(program=f"{P}:nope")
    with pytest.raises(ValueError, match="unknown tool parser 'mistral'"):
        AgentWorkflow(program=f"{P}:two_calls", tool_parser="mistral")
    with pytest.raises(ValueError, match="unknown option 'max_call' of workflow 'agent': did you mean 'max_calls'"):
        AgentWorkflow(program=f"{P}:two_calls", max_call=3)


def test_a_command_that_cannot_start_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    """A misspelt executable is a config error, not three failed steps after the model has loaded."""
    with pytest.raises(ValueError, match="workflow.options.command: 'pythn3-memrl' is not a program on PATH"):
        AgentWorkflow(command=["pythn3-memrl", "agent.py"])
    with pytest.raises(ValueError, match=r"'\./nope\.sh' does not exist \(relative paths start from "):
        AgentWorkflow(command=["./nope.sh"])
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho 1\n")
    with pytest.raises(ValueError, match=r"is not executable: chmod \+x it, or start it with its interpreter"):
        AgentWorkflow(command=[str(script)])
    script.chmod(0o755)
    assert AgentWorkflow(command=[str(script)]).options.command == [str(script)]
    monkeypatch.chdir(tmp_path)
    assert AgentWorkflow(command=["./agent.sh"]).options.command == ["./agent.sh"]
    assert AgentWorkflow(command=[sys.executable, "not-checked.py"]).options.command[0] == sys.executable


AGENT = """
import json, os, sys
from openai import OpenAI
sample = json.load(sys.stdin)
client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
r = client.chat.completions.create(model=os.environ["MEMRL_MODEL"], max_tokens=4,
                                   messages=[{"role": "user", "content": sample["doc"]}])
print("log line")
print(json.dumps({"reward": 0.5, "metrics": {"chars": len(r.choices[0].message.content)}}))
"""


def test_command_program(gateway, tools_tokenizer, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    traj = episode(gateway, tools_tokenizer, command=[sys.executable, str(script)])
    assert traj.reward == 0.5 and traj.metrics["chars"] == 5 and traj.num_conversations == 1
    conv = traj.conversations[0]  # max_tokens=4: " fine" fills the budget before the end-of-turn token
    assert tools_tokenizer.decode(conv.token_ids) == "<|im_start|>user\nd<|im_end|>\n<|im_start|>assistant\n fine"
    assert conv.meta["finish"] == "length" and conv.num_generated == 4


@pytest.mark.parametrize("code,message", [
    ("import sys; print('oops', file=sys.stderr); sys.exit(3)", "exited with status 3; stderr:\noops"),
    ("print('done')", "last stdout line 'done' is not JSON"),
    ("import time; time.sleep(60)", "did not finish within 1 s"),
])
def test_command_failures(gateway, tools_tokenizer, tmp_path, code, message):
    script = tmp_path / "agent.py"
    script.write_text(code)
    with pytest.raises(AgentProgramError) as err:
        episode(gateway, tools_tokenizer, command=[sys.executable, str(script)], timeout_s=1)
    assert message in str(err.value)


def test_a_dataclass_sample_reaches_the_program_as_a_dict(gateway, tools_tokenizer):
    from memrl.data.longctx import LongContextSample

    sample = LongContextSample(index=0, question="Capital of France?", answers=["Paris"], context="...", num_docs=1)
    assert episode(gateway, tools_tokenizer, sample, program=f"{P}:reads_question").reward == 1.0


def test_a_dead_engine_stops_the_run_instead_of_failing_one_episode(gateway, tools_tokenizer):
    from memrl.engines.base import EngineDeadError

    class Dead:
        async def generate(self, prompt_ids, params):
            raise EngineDeadError("engine process exited")

    wf = AgentWorkflow(program=f"{P}:two_calls")
    with pytest.raises(EngineDeadError, match="engine process exited"):
        asyncio.run(wf.episode({"doc": "d", "gold": "yes"}, engine=Dead(), tokenizer=tools_tokenizer,
                               sampling=SamplingParams(seed=1), services={"gateway": gateway}))


def test_a_program_blocking_its_loop_with_the_sync_sdk(gateway, tools_tokenizer):
    traj = episode(gateway, tools_tokenizer, program=f"{P}:sync_client", timeout_s=20)
    assert traj.reward == 1.0 and traj.num_conversations == 1
