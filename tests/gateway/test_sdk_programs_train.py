"""examples/agent_program's calculator agent written with each SDK trains 2 GRPO steps on the tiny model
(examples/agent_program/sdks.yaml, at smaller budgets).

The anthropic SDK (Messages), the openai SDK's Responses API, the OpenAI Agents SDK, the
openai SDK streaming, LangChain's ``ChatOpenAI`` with bound tools and LangGraph's prebuilt
agent: each builds its client from the episode's ``client.base_url`` /
``client.api_key``, no episode fails, and every recorded prompt is the chat template's ids
of the messages the call meant, followed by the sampled answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memrl import Trainer
from memrl.config import load_config
from memrl.workflows.api import chat_ids

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_program"
# LangGraph 1.x warns that create_react_agent has a successor in langchain.agents (create_agent); it still works.
MOVED = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
SAMPLES = [json.loads(line) for line in (EXAMPLE / "arithmetic.jsonl").read_text().splitlines()[:1]]


@pytest.mark.parametrize("program,needs", [("claude_messages:solve", "anthropic"),
                                           ("responses_tools:solve", "openai"),
                                           ("agents_sdk:solve", "agents"),
                                           ("streaming_chat:solve", "openai"),
                                           ("langchain_tools:solve", "langchain_openai"),
                                           pytest.param("langgraph_agent:solve", "langgraph", marks=MOVED)])
def test_sdk_program_trains_two_steps(tmp_path, monkeypatch, tiny_model, program, needs):
    pytest.importorskip(needs, reason="pip install 'memrl[dev]'")
    monkeypatch.syspath_prepend(str(EXAMPLE))
    cfg = load_config(EXAMPLE / "sdks.yaml", [f"workflow.options.program={program}", "workflow.options.max_tokens=4",
                                              "algorithm.n=2", "engine.device=cpu", "trainer.prompts_per_step=1",
                                              f"trainer.output_dir={tmp_path / 'run'}"])
    Trainer(cfg, train=SAMPLES).train()
    run = tmp_path / "run"
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if "reward" in m]
    assert [m["step"] for m in steps] == [1, 2] and all(m["failed_episodes"] == 0 for m in steps)
    rollouts = [json.loads(x) for f in sorted((run / "rollouts").glob("step_*.jsonl"))
                for x in f.read_text().splitlines()]
    convs = [c for r in rollouts for c in r["conversations"]]
    assert len(rollouts) == 4 and convs
    tok = tiny_model[1]
    for conv in convs:
        ids = chat_ids(tok, conv["meta"]["messages"], conv["meta"].get("tools"))
        n = len(ids)
        assert conv["token_ids"][:n] == ids and conv["loss_mask"][n - 1] == 0 and conv["loss_mask"][n] == 1
    first = convs[0]["meta"]["messages"]
    assert first[-1] == {"role": "user", "content": SAMPLES[0]["question"]}


def test_the_guide_shows_each_program_as_it_is():
    guide = (EXAMPLE.parents[1] / "docs" / "guides" / "train-your-agent.md").read_text()
    for name in ("claude_messages.py", "responses_tools.py", "agents_sdk.py", "streaming_chat.py",
                 "langchain_tools.py", "langgraph_agent.py"):
        assert (EXAMPLE / name).read_text().rstrip() in guide, f"docs/guides/train-your-agent.md: {name} differs"
