"""The two ways a tool agent's context is kept: token ids (``TokenSide``) or OpenAI chat messages (``ChatSide``).

``tool_agent`` drives an episode through either; both take the policy and tools once (``start``), then
give the model's parsed turn (``respond``) and take tool results and user turns. Token mode is what
training scores; chat mode talks to ``/v1/chat/completions`` and returns no token ids.
"""

from __future__ import annotations

import json
from typing import Any

from memrl.engines.base import Engine, SamplingParams
from memrl.engines.usage import count
from memrl.envs.messages import Message
from memrl.text.tool_calls import (FORMATS, ParsedTurn, TemplateFormat, get_parser, openai_call, openai_messages,
                                   read_openai_call)
from memrl.types import Conversation
from memrl.workflows.common import anchor, decode, encode_text, stop_token_ids, strip_stop


class TokenSide:
    """Token mode: the agent's context is one growing token sequence (what the trainer scores).

    The prompt is encoded once; each model turn is appended as sampled (loss 1); tool results,
    user turns and the end token of a cut turn are encoded as loss-0 segments.
    """

    def __init__(self, engine: Engine, tokenizer: Any, config: Any, env: Any) -> None:
        self.engine, self.tokenizer, self.config, self.env = engine, tokenizer, config, env
        self.fmt = TemplateFormat(tokenizer) if config.tool_format == "template" else FORMATS[config.tool_format]
        self.parse = get_parser(config.tool_parser)
        self.stops = stop_token_ids(tokenizer)
        self.conv = Conversation()
        self.end_ids: list[int] = []
        self.turns: list[Conversation] | None = [] if getattr(config, "record", "episode") == "turns" else None

    def start(self, policy: str, tools: list[dict[str, Any]], messages: list[Message]) -> None:
        self.conv.append(encode_text(self.tokenizer, self.fmt.prompt(policy, tools, messages)), generated=False)
        self.end_ids = encode_text(self.tokenizer, self.fmt.end)  # a template's end token is known once rendered

    def budget(self) -> int:
        return min(self.config.turn_tokens, self.config.max_total_tokens - len(self.conv.token_ids))

    async def respond(self, params: SamplingParams) -> tuple[ParsedTurn, bool]:
        """The model's next turn, parsed; and whether it hit the turn's token limit."""
        res = await self.engine.generate(self.conv.token_ids, params)
        if self.turns is not None:
            self._record_turn(res)
        self.conv.append(res.token_ids, generated=True, logprobs=res.logprobs)
        self.conv.meta["finish"] = res.finish_reason  # the one growing conversation's: its latest turn's
        truncated = False
        if not res.token_ids or res.token_ids[-1] not in self.stops:
            truncated = res.finish_reason == "length"
            self.conv.append(self.end_ids, generated=False)  # close the turn so the next segment is well formed
        return self.parse(decode(self.tokenizer, strip_stop(res.token_ids, self.stops))), truncated

    def _record_turn(self, res: Any) -> None:
        """``record=turns``: this call as its own conversation, the context so far as its prompt, anchored at
        the database state and that context (shared by the episodes that reached both alike)."""
        prompt = list(self.conv.token_ids)
        self.turns.append(Conversation.from_prompt_response(  # type: ignore[union-attr]
            prompt, res.token_ids, res.logprobs,
            meta={"finish": res.finish_reason, "state": anchor(self.env.db_hash(), prompt)}))

    def conversations(self) -> list[Conversation]:
        """What the episode trains on: the one growing context, or with ``record=turns`` each call's own
        conversation (the prompt-only context when no call was made)."""
        return self.turns or [self.conv]

    def tool_results(self, results: list[str], errors: list[str]) -> None:
        self._add(self.fmt.after_tool_results(results + [f"Error: {err}" for err in errors]))

    def user_turn(self, text: str) -> None:
        self._add(self.fmt.after_user(text))

    def _add(self, text: str) -> None:
        self.conv.append(encode_text(self.tokenizer, text), generated=False)

    @property
    def response_tokens(self) -> int:
        return self.conv.num_generated

    def final_text(self) -> str:
        return decode(self.tokenizer, self.conv.generated_ids())


class ChatSide:
    """Chat mode (``workflow.options.tool_protocol=openai_chat``): the agent's context is a list of OpenAI chat
    messages sent to ``/v1/chat/completions`` with the tools; the server's chat template and tool
    parser turn them into a prompt and the reply into ``tool_calls``. No token ids: eval and serving only.

    ``max_total_tokens`` is checked against the server's ``usage`` (prompt + completion of the last
    turn) when it reports one.
    """

    stops: tuple[int, ...] = ()

    def __init__(self, engine: Engine, config: Any) -> None:
        if not callable(getattr(engine, "chat", None)):
            raise ValueError("workflow.options.tool_protocol=openai_chat needs an engine that speaks "
                             "/v1/chat/completions "
                             f"(engine.kind=openai), got {type(engine).__name__}")
        self.engine, self.config = engine, config
        self.conv = Conversation()  # stays empty: nothing to train on
        self.chat: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.context_tokens = 0
        self.response_tokens = 0
        self._texts: list[str] = []
        self._pending: list[tuple[str, bool]] = []  # (tool_call_id, parsed) of the last turn's calls, in order
        self._made = 0
        self.tool_choice = "auto"  # "required" for τ²-bench's solo agent

    def start(self, policy: str, tools: list[dict[str, Any]], messages: list[Message]) -> None:
        self.chat, self.tools = openai_messages(policy, messages), tools

    def budget(self) -> int:
        return min(self.config.turn_tokens, self.config.max_total_tokens - self.context_tokens)

    async def respond(self, params: SamplingParams) -> tuple[ParsedTurn, bool]:
        omit = tuple(getattr(self.config, "chat_omit", ()))
        reply = await self.engine.chat(self.chat, self.tools, params, omit=omit,  # type: ignore[attr-defined]
                                       tool_choice=self.tool_choice)
        count("agent", reply)
        self.context_tokens = (reply.prompt_tokens or 0) + (reply.completion_tokens or 0)
        self.response_tokens += reply.completion_tokens or 0
        self._texts.append(reply.content or "")
        parsed = ParsedTurn(reply.content or "")  # verbatim, as τ²-bench shows the user the agent's words
        echoed, self._pending = [], []
        for raw in reply.tool_calls:
            self._made += 1
            call_id, call, err = read_openai_call(raw, f"call_{self._made}")
            if call is not None:
                parsed.calls.append(call)
            else:
                parsed.errors.append(err or "invalid tool call")
            self._pending.append((call_id, call is not None))
            echoed.append(echo_call(raw, call_id, call))
        entry: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if echoed:
            entry["tool_calls"] = echoed
        self.chat.append(entry)
        return parsed, reply.finish_reason == "length"

    def tool_results(self, results: list[str], errors: list[str]) -> None:
        """Answer every call of the last turn, in its order, by ``tool_call_id`` (the API requires all)."""
        ok, bad = iter(results), iter(errors)
        for call_id, parsed in self._pending:
            content = next(ok) if parsed else f"Error: {next(bad)}"
            self.chat.append({"role": "tool", "tool_call_id": call_id, "content": content})

    def user_turn(self, text: str) -> None:
        self.chat.append({"role": "user", "content": text})

    def final_text(self) -> str:
        return "\n".join(t for t in self._texts if t)

    def conversations(self) -> list[Conversation]:
        return [self.conv]


def echo_call(raw: Any, call_id: str, call: Any) -> dict[str, Any]:
    """A server's tool call as it goes back in the assistant message. A call that parsed goes back as
    τ²-bench sends it (its arguments re-written by ``json.dumps``, whatever spacing or escapes the model
    used); one that did not keeps the text the model wrote."""
    if call is not None:
        return openai_call(call, call_id, ascii_json=True)
    fn = raw.get("function") if isinstance(raw, dict) else None
    fn = fn if isinstance(fn, dict) else {}
    args = fn.get("arguments", "")
    return {"id": call_id, "type": "function",
            "function": {"name": str(fn.get("name") or ""),
                         "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}}
