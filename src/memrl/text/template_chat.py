"""A token engine answering chat requests as an OpenAI-compatible server would: ``TemplateChat``.

vLLM and SGLang turn a ``/chat/completions`` request into a prompt with the model's own chat template
(the tools passed to it; each earlier call's JSON arguments handed to the template as an object) and
read tool calls back out of the answer with a tool parser. ``TemplateChat`` does the same in-process
over any token engine, with the hermes parser (Qwen 2.5/3, Hermes, SmolLM), so a local side model
(``env.user.engine=hf env.user.protocol=chat``) works its tools by function calling, as it would
behind ``vllm serve --enable-auto-tool-choice --tool-call-parser hermes``. Nothing constrains decoding:
``tool_choice`` is not enforced (as vLLM's "auto"), and a request that leaves ``max_tokens`` out gets
``default_max_tokens`` (a local engine needs a cap).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memrl.engines.base import Engine, SamplingParams
from memrl.engines.openai_chat import ChatReply
from memrl.text.tokens import chat_ids, decode, stop_token_ids, strip_stop
from memrl.text.tool_calls import ToolParser, get_parser, split_tool_calls


def template_message(m: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as a chat template takes it: tool-call arguments as objects (vLLM parses the
    JSON text before rendering; text that is not a JSON object stays as written)."""
    out = dict(m)
    if out.get("tool_calls"):
        out["tool_calls"] = [_with_object_arguments(c) for c in out["tool_calls"]]
    return out


def _with_object_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = dict(call.get("function") or {})
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            parsed = args
        fn["arguments"] = parsed if isinstance(parsed, dict) else args
    return {**call, "function": fn}


def as_chat(engine: Any, tokenizer: Any) -> Any:
    """``engine`` if it answers chat requests itself (an OpenAI-compatible server), else a :class:`TemplateChat`."""
    return engine if callable(getattr(engine, "chat", None)) else TemplateChat(engine, tokenizer)


class TemplateChat:
    """``chat(messages, tools, params)`` over ``engine`` and ``tokenizer`` (see the module docstring)."""

    def __init__(self, engine: Engine, tokenizer: Any, parser: ToolParser | None = None,
                 default_max_tokens: int = 2048) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("protocol chat on a local engine renders requests with the tokenizer's chat template, "
                             "and this tokenizer has none; use protocol tokens")
        self.engine, self.tokenizer = engine, tokenizer
        self.parse = parser or get_parser("hermes")
        self.default_max_tokens = default_max_tokens
        self.stops = stop_token_ids(tokenizer)

    async def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                   params: SamplingParams, *, omit: tuple[str, ...] = (), tool_choice: str = "auto") -> ChatReply:
        ids = chat_ids(self.tokenizer, [template_message(m) for m in messages], list(tools) or None)
        cap = self.default_max_tokens if "max_tokens" in omit else params.max_new_tokens
        sampling = params.with_(max_new_tokens=cap, stop_token_ids=self.stops,
                                top_p=1.0 if "top_p" in omit else params.top_p)
        res = await self.engine.generate(ids, sampling)
        answer = split_tool_calls(decode(self.tokenizer, strip_stop(res.token_ids, self.stops)), self.parse)
        finish = "tool_calls" if answer.tool_calls else res.finish_reason
        return ChatReply(answer.content, answer.tool_calls, finish, len(ids), len(res.token_ids))

    def __getattr__(self, name: str) -> Any:  # close(), alive() and the rest are the engine's
        return getattr(self.engine, name)
