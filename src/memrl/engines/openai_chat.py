"""The ``/v1/chat/completions`` side of the OpenAI-compatible client: messages and tools in, a message out.

The token engines keep an agent's context as token ids so that the trainer scores exactly what was
sampled. A server that only speaks chat (OpenAI itself, or vLLM/SGLang where the model's own chat
template and tool parser should decide the prompt) gets the conversation as OpenAI chat messages
and the tools as ``{"type": "function", "function": {...}}`` schemas, and answers with
``message.content`` and ``message.tool_calls``. No token ids come back, so this path evaluates and
serves; it cannot train. ``OpenAIEngine.chat`` sends these payloads through the same pooled client,
API-key header, timeouts and retries as its ``/completions`` requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memrl.engines.base import EngineError, SamplingParams
from memrl.engines.usage import count


@dataclass
class ChatReply:
    """One assistant message from a chat server.

    ``tool_calls`` are the raw ``message.tool_calls`` entries: their ``arguments`` are the JSON
    text the model wrote and may not parse, which the caller reports back to the model.
    ``prompt_tokens``/``completion_tokens`` come from ``usage`` when the server sends it, ``cached_tokens``
    from its ``prompt_tokens_details`` (the prompt tokens served from the server's cache).
    """

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


OMITTABLE = frozenset({"max_tokens", "top_p"})


def side_omits(max_tokens: int | None) -> tuple[str, ...]:
    """What a side model's request leaves out, as τ²-bench's do: ``top_p``, and ``max_tokens`` unless set."""
    return ("top_p",) if max_tokens is not None else ("top_p", "max_tokens")


async def side_chat(engine: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *,
                    max_tokens: int | None, temperature: float, seed: int | None, role: str) -> ChatReply:
    """One request of a side model (``role``: user, judge) as τ²-bench sends it: no ``top_p``, and no
    ``max_tokens`` unless one is set. Its usage goes to the episode's meter (:mod:`memrl.engines.usage`)."""
    params = SamplingParams(max_new_tokens=max_tokens or 1, temperature=temperature, seed=seed)
    reply = await engine.chat(messages, tools, params, omit=side_omits(max_tokens))
    count(role, reply)
    return reply


def chat_payload(model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                 params: SamplingParams, *, omit: tuple[str, ...] = (), tool_choice: str = "auto") -> dict[str, Any]:
    """The request body; greedy decoding is sent as temperature 0 and top_p 1 as for ``/completions``.

    With tools, ``tool_choice`` is sent, "auto" unless said otherwise, as τ²-bench sends it (a vLLM server
    started without ``--enable-auto-tool-choice`` then says so instead of answering in text; τ²-bench's
    solo agent sends "required"). ``omit`` names fields
    to leave out, so the server's own defaults apply: τ²-bench sends its user simulator and judge
    neither ``max_tokens`` nor ``top_p`` (:func:`side_omits`).
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(m) for m in messages],
        "temperature": 0.0 if params.is_greedy else params.temperature,
        "top_p": 1.0 if params.is_greedy else params.top_p,
    }
    body["max_tokens"] = params.max_new_tokens
    if tools:  # an empty list is refused by some servers: leave the field out instead
        body["tools"] = [dict(t) for t in tools]
        body["tool_choice"] = tool_choice
    if params.top_k > 0 and not params.is_greedy:
        body["top_k"] = params.top_k  # a vLLM/SGLang extension that OpenAI refuses: sent only when set
    if params.seed is not None:
        body["seed"] = params.seed
    unknown = set(omit) - OMITTABLE
    if unknown:
        raise ValueError(f"chat_payload: cannot omit {sorted(unknown)}; only {sorted(OMITTABLE)}")
    return {k: v for k, v in body.items() if k not in omit}


def parse_chat_reply(body: Mapping[str, Any]) -> ChatReply:
    """Read ``choices[0].message`` and ``usage``; a body without them is an ``EngineError`` naming the field."""
    choices = body.get("choices") if isinstance(body, Mapping) else None
    if not choices or not isinstance(choices[0], Mapping):
        raise EngineError(f"chat completion without choices[0]: {str(body)[:200]}")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise EngineError(f"chat completion without choices[0].message: {str(choices[0])[:200]}")
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise EngineError(f"choices[0].message.tool_calls is not a list: {str(calls)[:200]}")
    usage = body.get("usage") if isinstance(body.get("usage"), Mapping) else {}
    details = usage.get("prompt_tokens_details")
    return ChatReply(content=content if isinstance(content, str) else None, tool_calls=list(calls),
                     finish_reason=str(choices[0].get("finish_reason") or "stop"),
                     prompt_tokens=_count(usage.get("prompt_tokens")),
                     completion_tokens=_count(usage.get("completion_tokens")),
                     cached_tokens=_count(details.get("cached_tokens")) if isinstance(details, Mapping) else None)


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
