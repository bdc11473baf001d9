"""``env.prompts: tau2``: the system prompt and tool schemas τ²-bench gives its agent, from the user's τ²-bench.

memrl's τ²-bench tools are its own code, and their docstrings are memrl's own wording, so the schemas
an agent reads by default (``memrl``) are not τ²-bench's: the same tools and arguments, other
sentences, alphabetical order; and its system prompt is the policy alone, where τ²-bench's agent
(``LLMAgent``) wraps the policy in its instructions. Both are τ²-bench's text, so memrl does not carry
them; with ``tau2`` it imports the τ²-bench package the user installed (``pip install -e <clone>``),
formats the system prompt as ``LLMAgent.system_prompt`` does, and asks each of its toolkit classes for
what it gives its agent (``as_tool(method).openai_schema``, in the toolkit's order): byte for byte what
τ²-bench prompts with, so eval numbers can be set beside its leaderboard's. In solo mode the agent is
τ²-bench's ``LLMSoloAgent``: its prompt holds the task's ticket, and it ends the episode by calling the
``done`` tool it adds (text without ``###STOP###`` is an agent error). Each memrl toolkit names its
τ²-bench counterpart (``Toolkit.tau2_class``);
a tool memrl shows that τ²-bench's class lacks (another τ²-bench version) is refused in one line.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

SOURCES = ("memrl", "tau2")


def _import_tau2(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(f"env.prompts=tau2 takes the agent's prompt and tool descriptions from τ²-bench's own "
                         f"code: install it (pip install -e <your tau2-bench clone>); importing it failed: {exc}") \
            from None


def tau2_system_prompt(policy: str) -> str:
    """τ²-bench's agent system prompt around ``policy`` (``LLMAgent.system_prompt``)."""
    agent = _import_tau2("tau2.agent.llm_agent")
    return agent.SYSTEM_PROMPT.format(domain_policy=policy, agent_instruction=agent.AGENT_INSTRUCTION)


def _solo_agent(policy: str, task: Any) -> Any:
    """τ²-bench's ``LLMSoloAgent`` for ``policy`` and ``task`` (a stand-in for the tools it checks by name)."""
    from types import SimpleNamespace

    solo = _import_tau2("tau2.agent.llm_agent").LLMSoloAgent
    return solo(tools=[SimpleNamespace(name=solo.TRANSFER_TOOL_NAME)], domain_policy=policy, task=task, llm="-")


def tau2_solo_prompt(policy: str, task: Any) -> str:
    """τ²-bench's solo agent's system prompt (its instructions, ``policy``, the ``task``'s ticket), for a task it
    takes: one it refuses (no ticket; no gold actions; a history holding conversation) is a one-line error."""
    if task is None or not task.ticket:
        raise ValueError(f"env.prompts=tau2 with env.solo=true runs τ²-bench's solo agent, whose prompt holds the "
                         f"task's ticket, and task {getattr(task, 'id', None)} has none (τ²-bench runs telecom's and "
                         "mock's ticketed tasks solo)")
    theirs = _import_tau2("tau2.data_model.tasks").Task.model_validate(task.model_dump(exclude_none=True))
    solo = _import_tau2("tau2.agent.llm_agent").LLMSoloAgent
    if not solo.check_valid_task(theirs):
        raise ValueError(f"env.prompts=tau2 with env.solo=true: τ²-bench's solo agent refuses task {task.id} "
                         "(LLMSoloAgent.check_valid_task: it needs gold actions, and a history of tool calls only)")
    return _solo_agent(policy, theirs).system_prompt


@functools.lru_cache(maxsize=1)
def tau2_stop_tool() -> tuple[str, dict[str, Any]]:
    """The name and schema of the tool τ²-bench's solo agent calls to end its episode (``done``)."""
    from types import SimpleNamespace

    task = SimpleNamespace(initial_state=None, ticket="-", evaluation_criteria=SimpleNamespace(actions=[None]))
    agent = _solo_agent("", task)
    return agent.STOP_FUNCTION_NAME, agent.tools[-1].openai_schema


@functools.lru_cache(maxsize=None)
def _tau2_tools(class_path: str) -> dict[str, dict[str, Any]]:
    """``{tool name: openai schema}`` of τ²-bench's toolkit class at ``class_path``, in its order."""
    from memrl.plugins import load_object

    as_tool = _import_tau2("tau2.environment.tool").as_tool
    cls = load_object(class_path, "τ²-bench toolkit")
    probe = object.__new__(cls)  # the schemas come from the methods alone: no database is needed
    return {name: as_tool(getattr(probe, name)).openai_schema for name in probe._func_tools}


def tau2_schemas(toolkit: Any, shown: list[str]) -> list[dict[str, Any]]:
    """τ²-bench's schemas for the tools ``toolkit`` shows (``shown``), in τ²-bench's order; a one-line error if
    they cannot be had."""
    path = getattr(type(toolkit), "tau2_class", None)
    if path is None:
        raise ValueError(f"env.prompts=tau2: {type(toolkit).__name__} has no τ²-bench counterpart (it applies "
                         "to τ²-bench's domains)")
    theirs = _tau2_tools(path)
    missing = sorted(set(shown) - set(theirs))  # τ²-bench's class may hold more (tools it reveals later)
    if missing:
        raise ValueError(f"env.prompts=tau2: τ²-bench's {path} has no tool {', '.join(missing)} that memrl's "
                         f"{type(toolkit).__name__} shows; is your τ²-bench v1.0 or later?")
    keep = set(shown)
    return [schema for name, schema in theirs.items() if name in keep]


def tau2_user_prompt(scenario: Any, with_tools: bool) -> str:
    """τ²-bench's user-simulator system prompt for ``scenario`` (a task's ``user_scenario``): its guidelines
    (those for a user with tools when ``with_tools``) and the scenario as τ²-bench writes it out."""
    tasks = _import_tau2("tau2.data_model.tasks")
    user = _import_tau2("tau2.user.user_simulator")
    instructions = str(tasks.UserScenario.model_validate(scenario.model_dump(exclude_none=True)))
    return user.UserSimulator(llm="-", instructions=instructions, tools=[] if with_tools else None).system_prompt


_ROLE, _CONTENT, _OUTCOMES = "\x00conversation", "\x00", "\x00outcomes\x00"
_CONVERSATION = f"{_ROLE}: {_CONTENT}"  # how τ²-bench renders the one stand-in message


class _Outcomes(list):
    """Stands for the assertions list where τ²-bench formats it into its prompt."""

    def __str__(self) -> str:
        return _OUTCOMES


class _Asked(Exception):
    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages


@functools.lru_cache(maxsize=1)
def _tau2_judge_template() -> tuple[str, str, str, str]:
    """(system, before the conversation, between it and the outcomes, after) of τ²-bench's judge prompt.

    τ²-bench writes the prompt inside ``NLAssertionsEvaluator.evaluate_nl_assertions``; it is asked once
    with stand-ins for the conversation and the outcomes, and its model call is caught before it leaves."""
    from types import SimpleNamespace
    from unittest import mock

    module = _import_tau2("tau2.evaluator.evaluator_nl_assertions")

    def ask(*, messages: list[Any], **_: Any) -> Any:
        raise _Asked(messages)

    with mock.patch.object(module, "generate", ask):
        try:
            module.NLAssertionsEvaluator.evaluate_nl_assertions([SimpleNamespace(role=_ROLE, content=_CONTENT)],
                                                                _Outcomes(["-"]))
            raise ValueError("env.prompts=tau2: τ²-bench's NL-assertion judge did not ask its model")
        except _Asked as asked:
            system, user = (m.content for m in asked.messages)
    if not user.count(_CONVERSATION) == user.count(_OUTCOMES) == 1 or user.index(_CONVERSATION) > user.index(_OUTCOMES):
        raise ValueError("env.prompts=tau2: this τ²-bench's judge prompt does not hold the conversation, then the "
                         "expected outcomes, once each")
    before, rest = user.split(_CONVERSATION)
    between, after = rest.split(_OUTCOMES)
    return system, before, between, after


def tau2_judge_chat(conversation: str, assertions: list[str]) -> list[dict[str, str]]:
    """τ²-bench's NL-assertion judge messages for ``conversation`` (``role: content`` lines) and ``assertions``."""
    system, before, between, after = _tau2_judge_template()
    user = before + conversation + between + str(list(assertions)) + after
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
