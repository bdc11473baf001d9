"""Parse tool calls out of model text, and render a ChatML tool-calling conversation.

Parsers turn one assistant message into (text for the user, tool calls, parse
errors). ``hermes`` reads ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
blocks (Qwen 2.5/3, Hermes, SmolLM); ``json`` reads a message that is only a JSON
object (or list of them) with ``name`` and ``arguments``. Both also read the
OpenAI form ``{"type": "function", "function": {"name": ..., "arguments": "<json>"}}``,
whose arguments are a JSON string. A block that does not parse is an *invalid*
call: it is reported back to the model as an error and counted in the tool-call
validity metric.

``openai_messages`` and ``read_openai_call`` are the same conversation and calls as
OpenAI chat messages, for ``workflow.tool_protocol=openai_chat``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memrl.envs.messages import Message, ToolCall

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


@dataclass
class ParsedTurn:
    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _to_call(obj: Any) -> ToolCall:
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]  # OpenAI's wrapper {"type": "function", "function": {name, arguments}}
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError('a tool call must be a JSON object with a string "name"')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI-style arguments given as a JSON string ("" for none)
        args = json.loads(args) if args.strip() else {}
    if not isinstance(args, dict):
        raise ValueError('"arguments" must be a JSON object')
    return ToolCall(obj["name"], args)


def parse_hermes(text: str) -> ParsedTurn:
    turn = ParsedTurn(_BLOCK.sub("", text).strip())
    for m in _BLOCK.finditer(text):
        body = m.group(1).strip()
        if not m.group(0).endswith("</tool_call>"):
            turn.errors.append("unclosed <tool_call> block")
            continue
        try:
            turn.calls.append(_to_call(json.loads(body)))
        except (json.JSONDecodeError, ValueError) as err:
            turn.errors.append(f"could not parse tool call {body[:80]!r}: {err}")
    return turn


def parse_json(text: str) -> ParsedTurn:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return ParsedTurn(stripped)
    try:
        obj = json.loads(stripped)
        objs = obj if isinstance(obj, list) else [obj]
        return ParsedTurn("", [_to_call(o) for o in objs])
    except (json.JSONDecodeError, ValueError) as err:
        return ParsedTurn("", errors=[f"could not parse tool call: {err}"])


PARSERS: dict[str, Callable[[str], ParsedTurn]] = {"hermes": parse_hermes, "json": parse_json}


def get_parser(name: str) -> Callable[[str], ParsedTurn]:
    if name not in PARSERS:
        raise ValueError(f"unknown tool parser {name!r}; choose {', '.join(PARSERS)}")
    return PARSERS[name]


def render_call(call: ToolCall) -> str:
    """An assistant tool call as the model should write it (hermes format)."""
    return "<tool_call>\n" + json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False) \
        + "\n</tool_call>"


@dataclass(frozen=True)
class ChatFormat:
    """ChatML rendering of a tool conversation, one segment at a time.

    ``tool_role`` is the role that carries tool results: ``user`` with
    ``<tool_response>`` blocks (Qwen 2.5/3) or ``tool`` (Hermes).
    """

    tool_role: str = "user"
    end: str = "<|im_end|>"

    def turn(self, role: str, text: str) -> str:
        return f"<|im_start|>{role}\n{text}{self.end}\n"

    @property
    def assistant_start(self) -> str:
        return "<|im_start|>assistant\n"

    def system(self, policy: str, tools: Sequence[dict[str, Any]]) -> str:
        lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        return self.turn("system", f"{policy.strip()}\n\n# Tools\n\nYou may call one or more functions to assist "
                         "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
                         f"XML tags:\n<tools>\n{lines}\n</tools>\n\nFor each function call, return a json object "
                         "with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                         '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')

    def tool_results(self, results: Sequence[str]) -> str:
        body = "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)
        return self.turn(self.tool_role, body)


FORMATS = {"qwen": ChatFormat("user"), "hermes": ChatFormat("tool")}


def openai_call(call: ToolCall, call_id: str) -> dict[str, Any]:
    """An agent's tool call as an OpenAI ``tool_calls`` entry (arguments as a JSON string, as the API sends them)."""
    return {"id": call_id, "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}


def read_openai_call(raw: Any, fallback_id: str) -> tuple[str, ToolCall | None, str | None]:
    """(id, call, error) of one ``message.tool_calls`` entry from a server.

    Arguments arrive as a JSON string that the model wrote; when it is not a JSON object the
    call is invalid, and ``error`` is what the model is told in the tool message answering it.
    """
    call_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"] else fallback_id
    try:
        call = _to_call(raw)
    except json.JSONDecodeError as err:
        name = raw.get("function", {}).get("name") if isinstance(raw, dict) else None
        return call_id, None, f"could not parse the arguments of tool call {name!r}: {err}"
    except (ValueError, AttributeError) as err:
        return call_id, None, f"could not parse tool call {json.dumps(raw)[:80]!r}: {err}"
    return call_id, ToolCall(call.name, call.arguments, id=call_id), None


def openai_messages(policy: str, msgs: Sequence[Message]) -> list[dict[str, Any]]:
    """The agent's view of a message log as OpenAI chat messages, behind a system message holding the policy.

    Shows what ``ChatFormat`` shows in token mode: the user's own device calls and their results are
    left out. Calls without ids (a task's scripted history) get ``call_N``; a tool message answers
    the oldest unanswered call, so ids pair up as the API requires.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": policy}]
    unanswered: list[str] = []
    for m in msgs:
        if m.role == "tool" and m.requestor == "user" or m.role == "user" and (m.tool_calls or not m.content):
            continue
        if m.role == "assistant":
            ids = [c.id or f"call_{len(out)}_{i}" for i, c in enumerate(m.tool_calls)]
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [openai_call(c, i) for c, i in zip(m.tool_calls, ids)]
            unanswered = ids
            out.append(entry)
        elif m.role == "tool":
            call_id = unanswered.pop(0) if unanswered else m.call_id
            out.append({"role": "tool", "tool_call_id": call_id, "content": m.content or ""})
        elif m.role in ("user", "system"):
            out.append({"role": m.role, "content": m.content or ""})
    return out
