"""What the Responses and Messages endpoints share: refusing fields by name, text parts, tool arguments.

Both APIs are served on the chat path (their request becomes chat messages and tools, the
chat answer becomes their response object), so each call is chat-templated and recorded
exactly as a chat completion is. What they cannot mean while training is refused with a 400
naming the field, as :mod:`memrl.gateway.requests` does for chat completions: an answer that
silently ignored a field would train the agent on something it did not ask for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from memrl.gateway.requests import bad, same_value
from memrl.gateway.sessions import Session


def refuse_unknown(body: BaseModel, no_ops: dict[str, tuple[Any, ...]], api: str,
                   reasons: dict[str, str] | None = None) -> None:
    """A 400 naming the first field ``body`` kept as extra, unless null or a value listed in ``no_ops``.

    ``no_ops`` maps a field to the values that change nothing (an empty tuple: any value, e.g. ``metadata``);
    ``reasons``: why a field is refused, where a reason says more than "not supported".
    """
    for key, value in (body.model_extra or {}).items():
        if value is None:
            continue
        allowed = no_ops.get(key)
        if allowed is not None and (not allowed or any(same_value(value, ok) for ok in allowed)):
            continue
        only = f" (accepted only as {', '.join(repr(v) for v in allowed)} or null)" if allowed else ""
        why = (reasons or {}).get(key, f"not supported by the training gateway's {api}")
        raise bad(key[:100], f"{why}{only}", "unsupported")


def positive(value: int | None, param: str) -> int | None:
    """A token budget the program set (None: the gateway's default); >= 1."""
    if value is not None and value < 1:
        raise bad(param, f"must be >= 1, got {value}")
    return value


def joined_text(content: Any, where: str, kinds: Sequence[str]) -> str:
    """A string, or a list of text parts of the given ``type`` names, as one string (parts joined by newlines)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(where, "must be a string or a list of text parts")
    parts = []
    for k, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in kinds or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else None
            raise bad(f"{where}[{k}]", f"only text parts ({' / '.join(kinds)}) are supported"
                      + (f", not {str(kind)[:40]!r}" if kind else ""), "unsupported")
        parts.append(part["text"])
    return "\n".join(parts)


def arguments(raw: Any, where: str) -> dict[str, Any]:
    """A tool call's arguments (a JSON string or an object) as the object a chat template renders."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise bad(where, f"not valid JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise bad(where, "must be a JSON object")
    return raw


def function_tool(name: Any, description: Any, parameters: Any, where: str) -> dict[str, Any]:
    """One tool in the chat form the chat template and the tool parser read."""
    if not isinstance(name, str) or not name:
        raise bad(f"{where}.name", "must be a non-empty string")
    if parameters is not None and not isinstance(parameters, dict):
        raise bad(f"{where}.parameters", "must be a JSON schema object")
    fn: dict[str, Any] = {"name": name}
    if isinstance(description, str):
        fn["description"] = description
    fn["parameters"] = parameters if parameters is not None else {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def stored_message(message: dict[str, Any]) -> dict[str, Any]:
    """The chat answer's message as the next prompt renders it (tool-call arguments as objects)."""
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [{**c, "function": {**c["function"], "arguments": arguments(
            c["function"].get("arguments"), "tool_calls")}} for c in calls]
    return out


async def on_episode(session: Session, fn: Callable[[], Any], fallback: Any) -> Any:
    """``fn()`` run on the episode's own loop (where its tokenizer is used); ``fallback`` if the episode ended."""
    async def run() -> Any:
        return fn()

    try:
        future = session.run(run())
    except RuntimeError:  # the episode's loop is gone
        return fallback
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if future.cancelled():  # the episode ended meanwhile
            return fallback
        raise
    except Exception:  # noqa: BLE001 - a tokenizer that cannot decode piecewise: the whole text as one piece
        return fallback
