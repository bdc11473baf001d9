"""``env.prompts=tau2``: the agent reads τ²-bench's own system prompt and tool schemas (the user simulator its tools').

A stand-in ``tau2`` package (written here, with made-up descriptions) checks the mechanism everywhere:
τ²-bench's order, the user's toolkit, a tool τ²-bench lacks, τ²-bench not installed. Where the real
τ²-bench is importable, every domain's schemas are compared with what its own environments give their agents.
"""

from __future__ import annotations

import json
import sys
from typing import Any
import textwrap

import pytest

from memrl.envs import tau2_schemas
from memrl.envs.domain import load_domain

FAKE_TOOL = '''
class _Tool:
    def __init__(self, fn):
        self.fn = fn

    @property
    def openai_schema(self):
        return {"type": "function", "function": {"name": self.fn.__name__, "description": "tau2: " + self.fn.__name__,
                                                 "parameters": {"title": "parameters", "type": "object"}}}


def as_tool(fn):
    return _Tool(fn)
'''


FAKE_SOLO = '''
from tau2.environment.tool import as_tool


class LLMSoloAgent:
    STOP_FUNCTION_NAME = "done"
    TRANSFER_TOOL_NAME = "transfer_to_human_agents"

    @classmethod
    def check_valid_task(cls, task):
        return bool(task.evaluation_criteria.get("actions"))

    def __init__(self, tools, domain_policy, task, llm):
        def done():
            pass

        self.tools = list(tools) + [as_tool(done)]
        self.system_prompt = f"<solo>{domain_policy}</solo><ticket>{task.ticket}</ticket>"
'''

FAKE_JUDGE = '''
from types import SimpleNamespace

CALLS = []


def generate(model, messages, **kwargs):
    CALLS.append(messages)
    return SimpleNamespace(content='{"results": []}')


class NLAssertionsEvaluator:
    @classmethod
    def evaluate_nl_assertions(cls, trajectory, nl_assertions):
        text = "\\n".join(f"{m.role}: {m.content}" for m in trajectory)
        messages = [SimpleNamespace(role="system", content="Judge {carefully}."),
                    SimpleNamespace(role="user", content=f"<c>{text}</c> then <o>{nl_assertions}</o>!")]
        generate(model="judge", messages=messages)
        return []
'''


def _toolkit(name: str, tools: list[str]) -> str:
    methods = "".join(f"    def {t}(self):\n        pass\n\n" for t in tools)
    order = ", ".join(f"{t!r}: None" for t in tools)
    return f"class {name}:\n    @property\n    def _func_tools(self):\n        return {{{order}}}\n\n{methods}"


def _drop_tau2() -> dict:
    """Take every ``tau2`` module out of ``sys.modules``; return them."""
    return {name: sys.modules.pop(name) for name in [m for m in sys.modules if m.split(".")[0] == "tau2"]}


@pytest.fixture
def fake_tau2(tmp_path, monkeypatch):
    """A ``tau2`` package with mock's two toolkits, tools in an order of its own (reversed alphabet).

    Any real ``tau2`` already imported is set aside and put back afterwards."""
    root = tmp_path / "fake"
    for pkg in ("tau2", "tau2/environment", "tau2/domains", "tau2/domains/mock", "tau2/agent", "tau2/evaluator",
                "tau2/data_model"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "tau2/environment/tool.py").write_text(FAKE_TOOL)
    (root / "tau2/evaluator/evaluator_nl_assertions.py").write_text(FAKE_JUDGE)
    (root / "tau2/data_model/tasks.py").write_text(
        "from types import SimpleNamespace\n\n\nclass Task:\n    @classmethod\n    def model_validate(cls, d):\n"
        "        return SimpleNamespace(**d)\n")
    (root / "tau2/agent/llm_agent.py").write_text(
        'AGENT_INSTRUCTION = "Be an agent."\nSYSTEM_PROMPT = "<i>{agent_instruction}</i><p>{domain_policy}</p>"\n'
        + FAKE_SOLO)
    real = _drop_tau2()

    def write(agent_tools, user_tools):
        (root / "tau2/domains/mock/tools.py").write_text(_toolkit("MockTools", agent_tools))
        (root / "tau2/domains/mock/user_tools.py").write_text(_toolkit("MockUserTools", user_tools))
        _drop_tau2()
        tau2_schemas._tau2_tools.cache_clear()

    monkeypatch.syspath_prepend(str(root))
    tau2_schemas._tau2_judge_template.cache_clear()
    tau2_schemas.tau2_stop_tool.cache_clear()
    yield write
    _drop_tau2()
    sys.modules.update(real)
    for cached in (tau2_schemas._tau2_tools, tau2_schemas._tau2_judge_template, tau2_schemas.tau2_stop_tool):
        cached.cache_clear()


@pytest.fixture
def mock_dir(tau2_dir):
    if not (tau2_dir / "mock").is_dir():
        pytest.skip(f"no mock domain data in {tau2_dir}")
    return tau2_dir


def test_the_agent_reads_tau2s_schemas_in_tau2s_order(fake_tau2, mock_dir):
    agent = ["update_task_status", "transfer_to_human_agents", "get_users", "create_task", "an_extra_one"]
    fake_tau2(agent, ["dismiss_notification", "check_notifications"])
    env = load_domain("mock", mock_dir, prompts="tau2").new_env(solo=False)
    schemas = env.tool_schemas()
    assert [s["function"]["name"] for s in schemas] == agent[:4]  # τ²-bench's order; only the tools memrl shows
    assert all(s["function"]["description"] == "tau2: " + s["function"]["name"] for s in schemas)
    assert [s["function"]["name"] for s in env.user_tools.schemas()] == ["dismiss_notification", "check_notifications"]
    solo_env = load_domain("mock", mock_dir, prompts="tau2").new_env(solo=True)
    solo = solo_env.tool_schemas()  # τ²-bench's solo agent: the user's tools too, and its own stop tool last
    assert [s["function"]["name"] for s in solo] == agent[:4] + ["dismiss_notification", "check_notifications", "done"]
    assert env.system_prompt() == f"<i>Be an agent.</i><p>{env.policy}</p>"  # τ²-bench's LLMAgent prompt
    tasks = {t.id: t for t in load_domain("mock", mock_dir).tasks}
    ticket = tasks["create_task_1"].ticket
    assert solo_env.system_prompt(tasks["create_task_1"]) == f"<solo>{solo_env.policy}</solo><ticket>{ticket}</ticket>"
    assert solo_env.stop_tool == "done" and env.stop_tool is None
    with pytest.raises(ValueError, match="runs τ²-bench's solo agent, whose prompt holds the task's ticket, and task "
                                         "update_task_with_message_history has none"):
        solo_env.system_prompt(tasks["update_task_with_message_history"])
    with pytest.raises(ValueError, match="τ²-bench's solo agent refuses task create_task_1_nl_eval"):
        solo_env.system_prompt(tasks["create_task_1_nl_eval"])
    plain_env = load_domain("mock", mock_dir).new_env(solo=False)
    assert plain_env.system_prompt() == plain_env.policy
    plain = plain_env.tool_schemas()
    assert [s["function"]["name"] for s in plain] == sorted(agent[:4])  # memrl's own: its wording, by name
    assert not any(s["function"]["description"].startswith("tau2: ") for s in plain)


def test_a_tool_tau2_lacks_or_no_tau2_is_one_line(fake_tau2, mock_dir):
    fake_tau2(["create_task", "get_users"], ["check_notifications", "dismiss_notification"])
    with pytest.raises(ValueError, match=r"^env.prompts=tau2: τ²-bench's tau2.domains.mock.tools:MockTools has no "
                                         r"tool transfer_to_human_agents, update_task_status that memrl's MockTools "
                                         r"shows; is your τ²-bench v1.0 or later\?$"):
        load_domain("mock", mock_dir, prompts="tau2")
    sys.modules["tau2.environment.tool"] = sys.modules["tau2.agent.llm_agent"] = None  # not installed
    tau2_schemas._tau2_tools.cache_clear()
    with pytest.raises(ValueError, match=r"^env.prompts=tau2 takes the agent's prompt and tool descriptions from "
                                         r"τ²-bench's own code: install it \(pip install -e <your tau2-bench clone>\)"):
        load_domain("mock", mock_dir, prompts="tau2")
    with pytest.raises(ValueError, match="env.prompts must be one of memrl, tau2"):
        load_domain("mock", mock_dir, prompts="tau3")


def test_the_library_domain_has_no_tau2_counterpart(tmp_path):
    from memrl_demo.tools_tasks import write_domain

    write_domain(tmp_path, 0, 1, 1)
    with pytest.raises(ValueError, match="LibraryTools has no τ²-bench counterpart"):
        load_domain("library", tmp_path, prompts="tau2")


def test_schemas_equal_the_real_tau2s(mock_dir):
    """Every domain's schemas against τ²-bench's own environments (where τ²-bench is installed)."""
    pytest.importorskip("tau2.environment.tool", reason="τ²-bench is not installed (pip install -e <clone>)")
    from tau2.agent.llm_agent import LLMAgent
    from tau2.domains.banking_knowledge.environment import get_environment
    from tau2.registry import registry

    for name in ("mock", "retail", "airline", "telecom"):
        theirs = registry.get_env_constructor(name)()
        ours = load_domain(name, mock_dir, prompts="tau2").new_env(solo=False)
        assert ours.tool_schemas() == [t.openai_schema for t in theirs.get_tools()], name
        agent = LLMAgent(tools=theirs.get_tools(), domain_policy=theirs.get_policy(), llm="any")
        assert ours.system_prompt() == agent.system_prompt, name
        if theirs.user_tools is not None:
            assert ours.user_tools.schemas() == [t.openai_schema for t in theirs.get_user_tools()], name
    for variant in ("bm25_grep", "no_knowledge"):
        theirs = get_environment(retrieval_variant=variant)
        ours = load_domain("banking_knowledge", mock_dir, prompts="tau2",
                           tool_options={"retrieval_variant": variant}).new_env()
        assert ours.tool_schemas() == [t.openai_schema for t in theirs.get_tools()], variant
        assert ours.user_tools.schemas() == [t.openai_schema for t in theirs.get_user_tools()], variant


def test_the_user_simulator_reads_tau2s_prompt(mock_dir, monkeypatch):
    """With prompts=tau2 the simulator's system prompt is τ²-bench's (stubbed here), then memrl's tool list."""
    from memrl.envs import user_sim
    from memrl.envs.user_sim import LLMUserSimulator

    seen = []
    monkeypatch.setattr(tau2_schemas, "tau2_user_prompt",
                        lambda scenario, with_tools: seen.append(with_tools) or "TAU2 USER PROMPT")
    task = load_domain("mock", mock_dir).get_tasks(None)[0]
    sim = LLMUserSimulator(None, None, prompts="tau2")
    assert sim.chat(task, [])[0]["content"] == "TAU2 USER PROMPT"
    tools = [{"type": "function", "function": {"name": "check_notifications"}}]
    assert sim.chat(task, [], tools)[0]["content"].startswith("TAU2 USER PROMPT" + user_sim.USER_TOOLS.split("{")[0])
    assert seen == [False, True]
    assert LLMUserSimulator(None, None).chat(task, [])[0]["content"] != "TAU2 USER PROMPT"


def test_a_user_prompt_file_and_tau2_prompts_are_not_both_taken(tmp_path):
    from memrl.config import load_config
    from memrl.workflows.tool_agent import build_user_simulator

    prompt = tmp_path / "user.txt"
    prompt.write_text("Play {scenario}")
    cfg = load_config(None, ["env.prompts=tau2", "env.user.model=tiny", f"env.user.prompt={prompt}"])
    with pytest.raises(ValueError, match="env.user.prompt is memrl's user prompt; env.prompts=tau2 prompts"):
        build_user_simulator(cfg)


def test_user_prompts_equal_the_real_tau2s(mock_dir):
    pytest.importorskip("tau2.environment.tool", reason="τ²-bench is not installed (pip install -e <clone>)")
    from tau2.registry import registry
    from tau2.user.user_simulator import UserSimulator

    for name in ("mock", "retail", "airline", "telecom"):
        theirs = {t.id: t for t in registry.get_tasks_loader(name)()}
        env = registry.get_env_constructor(name)()
        tools = env.get_user_tools() if env.user_tools is not None else None
        for task in load_domain(name, mock_dir).get_tasks(None):
            if task.id in theirs and task.user_scenario is not None:
                ref = UserSimulator(llm="any", instructions=str(theirs[task.id].user_scenario), tools=tools)
                assert tau2_schemas.tau2_user_prompt(task.user_scenario, tools is not None) == ref.system_prompt


def test_the_judge_reads_tau2s_prompt(fake_tau2):
    """τ²-bench's judge prompt is taken from its evaluator (stand-in here) without calling its model."""
    from memrl.envs.messages import Message
    from memrl.envs.nl_judge import judge_chat

    fake_tau2([], [])
    log = [Message("assistant", "Hi"), Message("user", "refund {42}"), Message("tool", "ok")]
    chat = judge_chat(["Agent refunds", "Agent's apology"], log, "tau2")
    assert chat == [{"role": "system", "content": "Judge {carefully}."},
                    {"role": "user", "content": "<c>assistant: Hi\nuser: refund {42}\ntool: ok</c> then "
                                                "<o>['Agent refunds', \"Agent's apology\"]</o>!"}]
    assert sys.modules["tau2.evaluator.evaluator_nl_assertions"].CALLS == []  # its model was never called
    assert judge_chat(["a"], log)[0]["content"] != "Judge {carefully}."  # memrl's own words by default


def test_judge_prompt_equals_the_real_tau2s():
    pytest.importorskip("tau2.evaluator.evaluator_nl_assertions", reason="τ²-bench is not installed")
    from unittest import mock

    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
    from tau2.evaluator import evaluator_nl_assertions as theirs

    from memrl.envs.messages import Message
    from memrl.envs.nl_judge import judge_chat

    talk = [AssistantMessage(role="assistant", content="Hi! How can I help?"),
            UserMessage(role="user", content="My order {W1} is late."),
            ToolMessage(id="c1", role="tool", content='{"status": "pending"}')]
    sent = []
    with mock.patch.object(theirs, "generate", lambda **kw: sent.append(kw["messages"]) or 1 / 0):
        with pytest.raises(ZeroDivisionError):
            theirs.NLAssertionsEvaluator.evaluate_nl_assertions(talk, ["Agent checks the order", "Agent's tone"])
    ours = judge_chat(["Agent checks the order", "Agent's tone"],
                      [Message(m.role, m.content) for m in talk], "tau2")
    assert ours == [{"role": m.role, "content": m.content} for m in sent[0]]


def test_tau2s_solo_agent_protocol(fake_tau2, mock_dir):
    """env.prompts=tau2 in solo mode is τ²-bench's LLMSoloAgent: the ticket in the system prompt and no user
    message, tool_choice "required", the episode ended by its done tool (not run; the turn becomes the stop
    message), and text without ###STOP### an agent error (not graded)."""
    import asyncio

    from memrl.engines.openai import OpenAIEngine
    from memrl.workflows.tool_agent import TaskSample, tool_agent
    from memrl.workflows.options import ToolAgentOptions
    from tests.engines.test_openai_chat import FakeChatServer, completion

    fake_tau2(["create_task", "get_users", "transfer_to_human_agents", "update_task_status"],
              ["check_notifications", "dismiss_notification"])
    domain = load_domain("mock", mock_dir, prompts="tau2")
    task = next(t for t in domain.get_tasks(None) if t.id == "create_task_1")
    gold = task.evaluation_criteria.actions[0]
    create = {"id": "c1", "type": "function", "function": {"name": gold.name, "arguments": json.dumps(gold.arguments)}}
    done = {"id": "c2", "type": "function", "function": {"name": "done", "arguments": "{}"}}

    def run(second: dict) -> tuple[Any, list[dict]]:
        replies = [completion({"content": None, "tool_calls": [create]}), completion(second)]
        with FakeChatServer(lambda body: replies[len(srv.requests) - 1]) as srv:
            engine = OpenAIEngine(srv.url, model="m", retries=0)
            config = ToolAgentOptions(tool_protocol="openai_chat")
            traj = asyncio.run(tool_agent(TaskSample(domain, task, solo=True), engine, None, config))
        return traj, srv.requests

    traj, sent = run({"content": None, "tool_calls": [done]})
    assert sent[0]["messages"] == [{"role": "system", "content": f"<solo>{domain.new_env(solo=True).policy}</solo>"
                                                                 f"<ticket>{task.ticket}</ticket>"}]
    assert all(b["tool_choice"] == "required" for b in sent) and sent[0]["tools"][-1]["function"]["name"] == "done"
    log = traj.info["messages"]
    assert traj.info["ending"] == "agent_stop" and traj.reward == 1.0
    assert log[-1] == {**log[-1], "role": "assistant", "content": "###STOP###", "tool_calls": []}
    assert [m["role"] for m in log] == ["assistant", "tool", "assistant"]  # done was never run
    traj, _ = run({"content": "I created the task."})
    assert traj.info["ending"] == "agent_error" and traj.reward == 0.0


def test_solo_prompt_and_tools_equal_the_real_tau2s(mock_dir):
    """τ²-bench's solo agent on telecom (its tickets) and mock: system prompt and tools, against its own."""
    pytest.importorskip("tau2.agent.llm_agent", reason="τ²-bench is not installed")
    from tau2.agent.llm_agent import LLMSoloAgent
    from tau2.registry import registry

    for name in ("telecom", "mock"):
        theirs_env = registry.get_env_constructor(name)(solo_mode=True)
        tools = theirs_env.get_tools() + (theirs_env.get_user_tools() if theirs_env.user_tools else [])
        ours = load_domain(name, mock_dir, prompts="tau2")
        mine = {t.id: t for t in ours.tasks}
        for task in [t for t in registry.get_tasks_loader(name)() if t.ticket][:5]:
            env = ours.new_env(solo=True)
            if not LLMSoloAgent.check_valid_task(task):  # τ²-bench refuses it, and memrl with it
                with pytest.raises(ValueError, match="τ²-bench's solo agent refuses task"):
                    env.system_prompt(mine[task.id])
                continue
            agent = LLMSoloAgent(tools=list(tools), domain_policy=theirs_env.get_policy(), task=task, llm="any")
            assert env.system_prompt(mine[task.id]) == agent.system_prompt, (name, task.id)
            assert env.tool_schemas() == [t.openai_schema for t in agent.tools], (name, task.id)


def test_tau2s_solo_agent_writing_text_is_an_error_even_with_the_stop_marker(fake_tau2, mock_dir):
    """τ²-bench's LLMSoloAgent raises on any text turn ("only supports tool calls"): such a run is never graded,
    so text holding ###STOP### is no agent stop (memrl graded it: reward 1 after the gold call)."""
    import asyncio

    from memrl.config import MemRLConfig
    from memrl.models.tiny import build_hf_tokenizer
    from memrl.text.tool_calls import render_call
    from memrl.envs.messages import ToolCall
    from memrl.workflows.tool_agent import TaskSample, tool_agent
    from tests.workflows.test_tool_agent import Script

    fake_tau2(["create_task", "get_users", "update_task_status", "transfer_to_human_agents"],
              ["check_notifications", "dismiss_notification"])
    mock = load_domain("mock", mock_dir, prompts="tau2")
    task = next(t for t in mock.tasks if t.id == "create_task_1")
    gold = task.evaluation_criteria.actions[0]
    tok = build_hf_tokenizer(["tool_call name arguments create_task Task created. ###STOP###"], vocab_size=400)
    cfg = MemRLConfig.model_validate({"workflow": {"name": "tool_agent", "options": {"max_total_tokens": 100_000}}})
    for last, ending in (("Task created. ###STOP###", "agent_error"), (render_call(ToolCall("done", {})), "agent_stop")):
        script = Script(tok, [render_call(ToolCall(gold.name, gold.arguments)), last])
        traj = asyncio.run(tool_agent(TaskSample(mock, task, solo=True), script.engine, tok, cfg.workflow))
        assert traj.info["ending"] == ending and traj.reward == float(ending == "agent_stop")
