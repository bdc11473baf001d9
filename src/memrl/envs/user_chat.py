"""A user simulator behind a chat API (``env.user.protocol=chat``), talking to it as τ²-bench does.

τ²-bench's simulator is a chat model (gpt-4.1 by default) reached through ``/chat/completions``:
its system prompt, then the conversation with roles flipped (the agent's text turns are its
"user" turns, its own turns are "assistant" turns), and in a dual-control domain (telecom) its
device tools as function-calling schemas with ``tool_choice`` "auto"; its tool calls come back as
``message.tool_calls`` and their results go back as ``tool`` messages under the call's id. The
agent's tool-calling turns never reach it. This class sends exactly that, so any chat server
(OpenAI, or vLLM/SGLang with their own chat template and tool parser) can play the user, and no
local tokenizer is needed; a local model plays it through :mod:`memrl.text.template_chat`. :class:`memrl.envs.user_sim.LLMUserSimulator` is the token-level
twin (memrl renders the prompt; tools are written as text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from memrl.engines.base import Engine
from memrl.engines.openai_chat import side_chat
from memrl.envs.messages import USER_GAVE_UP, InvalidMessageError, Message, ToolCall, rounds
from memrl.envs.tasks import Task
from memrl.envs.user_sim import AGENT_OPENING, USER_DEVICE, USER_SYSTEM, sent_to_user, user_system_prompt


def user_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The user's side of ``messages`` as OpenAI chat messages (τ²-bench's ``flip_roles``).

    Agent text (without tool calls) becomes "user"; the user's own turns become "assistant", with
    their device calls as ``tool_calls`` (arguments as JSON text); results of the user's calls become
    "tool" messages answering the call's id. The agent's tool calls and their results are left out.
    """
    from memrl.text.tool_calls import openai_call

    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if sent_to_user(m):
            out.append({"role": "user", "content": m.content})
        elif m.role == "user" and (m.content or m.tool_calls):
            entry: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                entry["tool_calls"] = [openai_call(c, c.id, ascii_json=True) for c in m.tool_calls]
            out.append(entry)
        elif m.role == "tool" and m.requestor == "user":
            out.append({"role": "tool", "tool_call_id": m.call_id, "content": m.content or ""})
    if len(out) == 1:
        out.append({"role": "user", "content": AGENT_OPENING})
    return out


UNREADABLE_CAP = 10  # a user that writes only unreadable calls this many times in a row gives up


class ChatUserSimulator:
    """A user played by a chat model: ``reply`` for text, ``act`` with the user's own device tools."""

    def __init__(self, engine: Engine, *, max_tokens: int | None = None, temperature: float = 1.0,
                 system_prompt: str | None = None, prompts: str = "memrl") -> None:
        """``max_tokens`` None sends no cap (τ²-bench sends none); ``prompts`` tau2: τ²-bench's system prompt."""
        if not callable(getattr(engine, "chat", None)):
            raise ValueError("env.user.protocol=chat needs an engine that speaks /v1/chat/completions (an "
                             "OpenAI-compatible server, or memrl.text.template_chat.as_chat(engine, tokenizer)), "
                             f"got {type(engine).__name__}")
        self.engine = engine
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.system_prompt = system_prompt or USER_SYSTEM
        self.prompts = prompts

    def messages(self, task: Task, messages: Sequence[Message], with_tools: bool = False) -> list[dict[str, Any]]:
        """What one request sends: the system prompt, then :func:`user_messages`."""
        system = user_system_prompt(task, self.system_prompt, self.prompts, with_tools)
        if with_tools and self.prompts != "tau2":  # τ²-bench's prompt for users with tools says it already
            system += USER_DEVICE
        return user_messages(system, messages)

    async def reply(self, task: Task, messages: Sequence[Message], *, seed: int | None = None) -> str:
        answer = await self._ask(self.messages(task, messages), [], seed)
        return answer.content or ""  # verbatim, as τ²-bench passes it on

    async def act(self, task: Task, messages: Sequence[Message], env: Any, *, seed: int | None = None,
                  max_rounds: int | None = 10, step_seed: bool = True,
                  halt: Callable[[list[Message]], bool] | None = None, strict: bool = False) -> list[Message]:
        """The user's next turn with their device tools: calls, each run on ``env`` as the user, until a
        text reply (the last message returned). A reply whose every call is unreadable is asked for again
        (``strict``: a call that cannot be read raises, as τ²-bench's ``generate`` does);
        after ``max_rounds`` the user gives up (:data:`USER_GAVE_UP`), as :meth:`LLMUserSimulator.act` does
        (and seeds and halts its rounds as it does; ``None``: no cap, ``halt`` ends the turn). Its text goes on
        verbatim, as τ²-bench's does ("" beside calls stays "")."""
        from memrl.text.tool_calls import read_openai_call

        tools = env.user_tools.schemas() if env.user_tools is not None else []
        new: list[Message] = []
        unreadable = 0  # replies in a row whose every call was unreadable: asked again, at most UNREADABLE_CAP
        for r in rounds(max_rounds):
            answer = await self._ask(self.messages(task, [*messages, *new], bool(tools)), tools,
                                     None if seed is None else seed + r * step_seed)
            made = len(messages) + len(new)
            read = [read_openai_call(raw, f"user_call_{made}_{k}") for k, raw in enumerate(answer.tool_calls)]
            if strict and any(c is None for _, c, _ in read):
                raise InvalidMessageError(f"the user's tool call could not be read (tau2-bench raises): "
                                          f"{next(e for _, c, e in read if c is None)}")
            calls = [ToolCall(c.name, c.arguments, id=i, requestor="user") for i, c, _ in read if c is not None]
            if not calls and answer.tool_calls:
                unreadable += 1
                if unreadable >= UNREADABLE_CAP:  # nothing runs, so no step limit would ever end this
                    break
                continue
            unreadable = 0
            if not calls:
                new.append(Message("user", answer.content or ""))
                return new
            new.append(Message("user", answer.content, calls))
            new += [env.step(c) for c in calls]
            if halt is not None and halt(new):  # a τ²-bench limit reached: the turn ends at these results
                return new
        new.append(Message("user", USER_GAVE_UP))
        return new

    async def _ask(self, chat: list[dict[str, Any]], tools: Sequence[dict[str, Any]], seed: int | None) -> Any:
        return await side_chat(self.engine, chat, tools, max_tokens=self.max_tokens, temperature=self.temperature,
                               seed=seed, role="user")
