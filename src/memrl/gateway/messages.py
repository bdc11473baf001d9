"""``/v1/messages`` (the Anthropic Messages API, what Anthropic-native agents speak) on the chat path.

A request becomes chat messages and tools: ``system`` (a string or text blocks) is the
system message; an assistant's ``tool_use`` blocks are its tool calls; a user's
``tool_result`` blocks are ``tool`` messages (before the user's own text, in the order
sent); ``tools`` with ``input_schema`` are function tools. The chat answer becomes the
Message the ``anthropic`` SDK parses: ``text`` and ``tool_use`` blocks and a ``stop_reason``
(``end_turn``, ``max_tokens``, ``stop_sequence`` with the sequence met, ``tool_use``).
"""

# No ``from __future__ import annotations`` here: pydantic reads these annotations at run time.
import uuid
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict

from memrl.gateway.adapters import arguments, function_tool, joined_text, refuse_unknown
from memrl.gateway.requests import bad
from memrl.serve.fields import MAX_STOP_STRINGS, Count, Flag, Number

# Fields that change nothing here, at these values (an empty tuple: any value).
NO_OPS: dict[str, tuple[Any, ...]] = {
    "metadata": (), "service_tier": ("auto", "standard_only"), "thinking": ({"type": "disabled"},),
    "container": (), "context_management": (), "mcp_servers": ([],), "cache_control": (),
}
# Refused fields a client sends by default, with what to do instead
_HINTS = {"thread": "server-side threads are not kept by the training gateway; the anthropic SDK's "
                    "tool_runner() sends one unless called with thread=False"}
_STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}


class MessagesBody(BaseModel):
    # Extra fields are kept so that refuse_unknown can name them; none is ignored silently.
    model_config = ConfigDict(extra="allow")
    model: Optional[str] = None
    messages: list[Any]
    max_tokens: Count
    system: Union[str, list[Any], None] = None
    tools: Optional[list[Any]] = None
    tool_choice: Optional[dict[str, Any]] = None
    stop_sequences: Optional[list[Any]] = None
    temperature: Optional[Number] = None
    top_p: Optional[Number] = None
    top_k: Optional[Count] = None
    stream: Optional[Flag] = False


class CountTokensBody(MessagesBody):
    """``/v1/messages/count_tokens``: a Messages request without ``max_tokens`` (what Claude Code sends)."""

    max_tokens: Optional[Count] = None  # type: ignore[assignment]


def check(body: MessagesBody) -> list[str]:
    """What a training call cannot honour, refused by name; the stop sequences."""
    for field, hint in _HINTS.items():
        if (body.model_extra or {}).get(field) is not None:
            raise bad(field, hint, "unsupported")
    refuse_unknown(body, NO_OPS, "Messages API")
    if body.max_tokens < 1:
        raise bad("max_tokens", f"must be >= 1, got {body.max_tokens}")
    if body.top_k is not None:
        raise bad("top_k", "the trainer's sampling.top_k applies to every call; leave it out", "unsupported")
    stops = body.stop_sequences or []
    if len(stops) > MAX_STOP_STRINGS:
        raise bad("stop_sequences", f"at most {MAX_STOP_STRINGS} stop sequences, got {len(stops)}")
    for i, s in enumerate(stops):
        if not isinstance(s, str) or not s:
            raise bad(f"stop_sequences[{i}]", "must be a non-empty string")
    return list(stops)


def one_tool_use(body: MessagesBody) -> bool:
    """``tool_choice.disable_parallel_tool_use``: answer with at most one ``tool_use`` block."""
    return bool((body.tool_choice or {}).get("disable_parallel_tool_use", False))


def tools_of(body: MessagesBody) -> Optional[list[dict[str, Any]]]:
    """The request's tools in chat form (None: none); ``tool_choice: {"type": "none"}`` keeps them in the prompt
    (as vLLM's chat path) and leaves the answer unparsed (:func:`parses_tools`)."""
    choice = (body.tool_choice or {}).get("type", "auto")
    if choice not in ("auto", "none"):
        raise bad("tool_choice", f"{str(choice)[:40]!r} needs constrained decoding, which the training gateway does "
                  "not do; send {'type': 'auto'} or {'type': 'none'}", "unsupported")
    out = []
    for i, tool in enumerate(body.tools or []):
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad(f"tools[{i}].type", f"only client tools with an input_schema are supported, not "
                      f"{str(kind)[:40]!r} (server tools run at Anthropic)", "unsupported")
        out.append(function_tool(tool.get("name"), tool.get("description"), tool.get("input_schema"), f"tools[{i}]"))
    return out or None


def parses_tools(body: MessagesBody) -> bool:
    """Whether the answer's tool calls are parsed: not under ``tool_choice: {"type": "none"}``."""
    return (body.tool_choice or {}).get("type", "auto") != "none"


def chat_messages(body: MessagesBody) -> list[dict[str, Any]]:
    """The request as chat messages, ready for the chat template; a 400 naming the first bad block."""
    out: list[dict[str, Any]] = []
    if body.system:
        out.append({"role": "system", "content": joined_text(body.system, "system", ("text",))})
    if not body.messages:
        raise bad("messages", "must not be empty")
    for i, m in enumerate(body.messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad(f"{where}.role", "must be user or assistant")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
        elif isinstance(content, list):
            out += _blocks(m["role"], content, f"{where}.content")
        else:
            raise bad(f"{where}.content", "must be a string or a list of content blocks")
    return out


def prefilled(messages: list[dict[str, Any]]) -> bool:
    """Whether the request ends with the assistant's own text to continue (Anthropic's prefill).

    The answer then continues that text, as the API does; an empty final assistant message is no
    prefill and is dropped (the API allows it). Trailing whitespace is refused, as the API refuses it.
    """
    last = messages[-1]
    if last["role"] != "assistant" or last.get("tool_calls"):
        return False
    if not last["content"]:
        messages.pop()
        return False
    if last["content"] != last["content"].rstrip():
        raise bad("messages", "final assistant content cannot end with trailing whitespace")
    return True


def _blocks(role: str, blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """One turn's blocks: its text joined, tool calls on the assistant's message, results as tool messages."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for k, block in enumerate(blocks):
        at = f"{where}[{k}]"
        if not isinstance(block, dict):
            raise bad(at, "a content block must be an object with a type")
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise bad(f"{at}.text", "must be a string")
            text.append(block["text"])
        elif kind == "tool_use" and role == "assistant":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise bad(at, "a tool_use block needs id and name strings")
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"], "arguments": arguments(block.get("input", {}), f"{at}.input")}})
        elif kind == "tool_result" and role == "user":
            if not isinstance(block.get("tool_use_id"), str):
                raise bad(f"{at}.tool_use_id", "must be the id of the tool_use block it answers")
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": joined_text(block.get("content", ""), f"{at}.content", ("text",))})
        else:
            raise bad(f"{at}.type", f"{str(kind)[:40]!r} blocks are not supported in a {role} turn (text, and "
                      f"{'tool_use' if role == 'assistant' else 'tool_result'}, are)", "unsupported")
    out = list(results)
    if text or calls or not results:
        message: dict[str, Any] = {"role": role, "content": "\n".join(text)}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out


def message_object(answer: dict[str, Any], stop_sequence: Optional[str]) -> dict[str, Any]:
    """The Message the SDK parses, from the chat answer (``stop_sequence``: the stop string it was cut at)."""
    choice = answer["choices"][0]
    message = choice["message"]
    content: list[dict[str, Any]] = []
    if message.get("content") or not message.get("tool_calls"):
        content.append({"type": "text", "text": message.get("content") or ""})
    for call in message.get("tool_calls") or []:
        content.append({"type": "tool_use", "id": "toolu_" + call["id"].removeprefix("call_"),  # Anthropic's prefix
                        "name": call["function"]["name"],
                        "input": arguments(call["function"]["arguments"], "tool_calls")})
    reason = "stop_sequence" if stop_sequence else _STOP_REASONS.get(choice["finish_reason"], "end_turn")
    usage = answer["usage"]
    return {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": answer["model"],
            "content": content, "stop_reason": reason, "stop_sequence": stop_sequence,
            "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
