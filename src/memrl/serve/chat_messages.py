"""Chat messages made ready for a Hugging Face chat template, checked first: what ``memrl serve`` and the
training gateway both do with a chat request's ``messages``.

As vLLM's chat endpoint: text content parts (``{"type": "text", "text": ...}``, what the openai SDK, LangChain
and the Agents SDK send) are joined with newlines, ``developer`` is a system message, and the arguments of an
assistant's earlier tool calls (a JSON string in the API) become objects for the template. Anything else is a
400 naming the first bad place (``messages[2].content[1]``): a text-only model never gets an image part, a
wrong role or a dict as the text of a Python object.
"""

# No ``from __future__ import annotations`` needed: nothing here is read by pydantic.
import json
from typing import Any

from memrl.serve.errors import APIError

ROLES = ("system", "developer", "user", "assistant", "tool")


def bad(param: str, message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, f"{param}: {message}", code=code, param=param)


def chat_messages(raw: list[Any]) -> list[dict[str, Any]]:
    """The request's messages ready for ``apply_chat_template``; a 400 naming the first bad one."""
    if not raw:
        raise bad("messages", "must not be empty")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(raw)]


def _message(m: Any, where: str) -> dict[str, Any]:
    if not isinstance(m, dict):
        raise bad(where, "a message must be an object with a role")
    role = m.get("role")
    if role not in ROLES:
        raise bad(f"{where}.role", f"must be one of {', '.join(ROLES)}")
    out = {k: v for k, v in m.items() if v is not None}  # as the SDK's models dump unset fields as null
    out["role"] = "system" if role == "developer" else role
    if "content" in out:
        out["content"] = _text(out["content"], f"{where}.content")
    if "tool_calls" in out:
        if role != "assistant" or not isinstance(out["tool_calls"], list):
            raise bad(f"{where}.tool_calls", "only an assistant message carries a list of tool calls")
        out["tool_calls"] = [_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(out["tool_calls"])]
    return out


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}[{k}]", "only text parts ({'type': 'text', 'text': ...}) are supported")
            parts.append(part["text"])
        return "\n".join(parts)
    raise bad(where, "must be a string or a list of text parts")


def _call(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad(where, 'must be {"id": ..., "type": "function", "function": {"name": ..., "arguments": "{...}"}}')
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise bad(f"{where}.function.arguments", f"not valid JSON ({exc.msg})") from None
        except (ValueError, RecursionError):  # a number past Python's digit limit, nesting past the stack
            raise bad(f"{where}.function.arguments", "not readable JSON (too deeply nested or too long a number)") \
                from None
    if not isinstance(args, dict):
        raise bad(f"{where}.function.arguments", "must be a JSON object")
    out = {k: v for k, v in call.items() if v is not None}
    out["function"] = {**fn, "arguments": args}
    return out
