"""User simulators: the other side of a tool-agent conversation.

``LLMUserSimulator`` prompts any engine (a local HF model or an
OpenAI-compatible server) with the task's user scenario, with roles flipped:
the agent's messages are its "user" turns. It ends the conversation by writing
``###STOP###`` (done), ``###TRANSFER###`` (handed to a human) or
``###OUT-OF-SCOPE###``, as in τ²-bench. ``ScriptedUser`` replays a function,
for tests and for deterministic debugging.

Dual control (τ²-bench's telecom): the user also has tools (their phone).
``LLMUserSimulator.act`` lets the simulator call them, as the user, until it
writes text; the calls and their results join the graded log, while the agent
is shown only the user's text.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from memrl.engines.base import Engine, SamplingParams
from memrl.envs.messages import USER_GAVE_UP, Message, ToolCall, rounds
from memrl.envs.tasks import Task
from memrl.io.text_files import read_text

STOP_MARKERS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
AGENT_OPENING = "Hi! How can I help you today?"  # the agent's first message in τ²-bench's orchestrator

USER_SYSTEM = """You are a customer talking to a help-desk agent. Play the person described below.

{scenario}

Rules:
- Write one short message at a time, as the customer, in plain language.
- Give information only when it is asked for or needed; never invent information you were not given.
- Never act as the agent and never call tools.
- When your request is fully handled (or clearly refused), write ###STOP### as your whole message.
- If you are transferred to a human agent, write ###TRANSFER###.
- If the agent cannot help with what you need, write ###OUT-OF-SCOPE###."""


USER_TOOLS = """

You also have your own device, and tools to use it (listed below). When the agent asks you to check or
change something on it, make the tool call rather than guessing, then tell the agent in plain words what
you saw. Never invent what a tool shows. To call a tool, write exactly:
<tool_call>
{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}
</tool_call>
Your tools:
{tools}"""

# The same advice where the tools travel as function-calling schemas (env.user.protocol=chat).
USER_DEVICE = USER_TOOLS[:USER_TOOLS.index(" To call a tool")].replace(" (listed below)", "")



class UserSimulator(Protocol):
    async def reply(self, task: Task, messages: Sequence[Message], *, seed: int | None = None) -> str: ...


def ends_conversation(text: str) -> str | None:
    """The marker in a user message that ends the episode, if any."""
    return next((m for m in STOP_MARKERS if m in text), None)


def read_user_prompt(path: str | None) -> str | None:
    """The text of a user prompt file (``env.user.prompt``), which must hold the ``{scenario}`` slot."""
    text = read_text(path) if path else None
    if text is not None and "{scenario}" not in text:
        raise ValueError(f"{path}: a user prompt must contain the {{scenario}} slot")
    return text


def user_system_prompt(task: Task, template: str, prompts: str, with_tools: bool) -> str:
    """The simulator's system prompt: τ²-bench's own (``prompts`` tau2) or ``template`` with the scenario."""
    if prompts == "tau2" and task.user_scenario is not None:
        from memrl.envs.tau2_schemas import tau2_user_prompt

        return tau2_user_prompt(task.user_scenario, with_tools)
    scenario = task.user_scenario.render() if task.user_scenario else task.first_message()
    return template.format(scenario=scenario)


def sent_to_user(m: Message) -> bool:
    """Whether the user reads this agent message: text without tool calls. As in τ²-bench, a turn that
    calls tools goes to the environment, and any text written beside the calls never reaches the user."""
    return m.role == "assistant" and bool(m.content) and not m.tool_calls


class ScriptedUser:
    """A user whose replies come from ``fn(task, messages)`` (sync or async)."""

    def __init__(self, fn: Callable[[Task, Sequence[Message]], Any]) -> None:
        self.fn = fn

    async def reply(self, task: Task, messages: Sequence[Message], *, seed: int | None = None) -> str:
        out = self.fn(task, messages)
        return await out if inspect.isawaitable(out) else out


class LLMUserSimulator:
    """A user played by a language model behind the engine protocol."""

    def __init__(self, engine: Engine, tokenizer: Any, *, max_tokens: int | None = 256,
                 temperature: float = 1.0, system_prompt: str | None = None, prompts: str = "memrl") -> None:
        """``prompts`` tau2: the system prompt is τ²-bench's own (:func:`memrl.envs.tau2_schemas.tau2_user_prompt`)."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.max_tokens = 256 if max_tokens is None else max_tokens
        self.temperature = temperature
        self.system_prompt = system_prompt or USER_SYSTEM
        self.prompts = prompts

    def chat(self, task: Task, messages: Sequence[Message],
             tools: Sequence[dict[str, Any]] = ()) -> list[dict[str, str]]:
        """The conversation from the user's side (agent text -> 'user', own text -> 'assistant').

        With ``tools`` (dual control) the prompt lists them, the user's own calls are its
        'assistant' turns and their results come back as 'user' turns; the agent's calls stay hidden.
        """
        from memrl.text.tool_calls import render_call

        system = user_system_prompt(task, self.system_prompt, self.prompts, bool(tools))
        if tools:
            system += USER_TOOLS.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
        chat = [{"role": "system", "content": system}]
        for m in messages:
            if sent_to_user(m):
                chat.append({"role": "user", "content": m.content})
            elif m.role == "user" and (m.content or m.tool_calls):
                text = "\n".join([m.content or ""] + [render_call(c) for c in m.tool_calls]).strip()
                chat.append({"role": "assistant", "content": text})
            elif m.role == "tool" and m.requestor == "user":
                chat.append({"role": "user", "content": f"<tool_response>\n{m.content}\n</tool_response>"})
        if len(chat) == 1:
            chat.append({"role": "user", "content": AGENT_OPENING})
        return chat

    async def reply(self, task: Task, messages: Sequence[Message], *, seed: int | None = None) -> str:
        return await self._generate(self.chat(task, messages), seed)

    async def act(self, task: Task, messages: Sequence[Message], env: Any, *, seed: int | None = None,
                  max_rounds: int | None = 10, step_seed: bool = True,
                  halt: Callable[[list[Message]], bool] | None = None) -> list[Message]:
        """The user's next turn with their own tools (``env.user_tools``): tool calls, each run on ``env``
        as the user, until a text reply (the last message returned). After ``max_rounds`` rounds of calls
        the user gives up (:data:`USER_GAVE_UP`, ungraded), so a looping simulator cannot stall the episode. Round
        ``r`` samples with ``seed + r`` (``step_seed=False``: ``seed`` on every round, as τ²-bench seeds).
        ``halt(messages so far)`` True after a round's results ends the turn there, without a text reply
        (a τ²-bench step or error limit, :mod:`memrl.workflows.tool_steps`)."""
        from memrl.text.tool_calls import parse_hermes

        tools = env.user_tools.schemas() if env.user_tools is not None else []
        new: list[Message] = []
        for r in rounds(max_rounds):
            text = await self._generate(self.chat(task, [*messages, *new], tools),
                                        None if seed is None else seed + r * step_seed)
            turn = parse_hermes(text) if tools else None
            if turn is None or not turn.calls:  # text (an unparseable call stays text: the agent reads it)
                new.append(Message("user", text))
                return new
            calls = [ToolCall(c.name, c.arguments, id=f"user_call_{len(messages) + len(new)}_{k}", requestor="user")
                     for k, c in enumerate(turn.calls)]
            new.append(Message("user", turn.content or None, calls))
            new += [env.step(c) for c in calls]
            if halt is not None and halt(new):  # a τ²-bench limit reached: the turn ends at these results
                return new
        new.append(Message("user", USER_GAVE_UP))
        return new

    async def _generate(self, chat: list[dict[str, str]], seed: int | None) -> str:
        from memrl.text.tokens import decode, encode_text, stop_token_ids, strip_stop

        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        else:
            text = "".join(f"<|im_start|>{c['role']}\n{c['content']}<|im_end|>\n" for c in chat)
            text += "<|im_start|>assistant\n"
        stops = stop_token_ids(self.tokenizer)
        params = SamplingParams(max_new_tokens=self.max_tokens, temperature=self.temperature,
                                stop_token_ids=stops, seed=seed)
        res = await self.engine.generate(encode_text(self.tokenizer, text), params)
        return decode(self.tokenizer, strip_stop(res.token_ids, stops)).strip()
