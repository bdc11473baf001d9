"""``/v1/responses`` (the OpenAI Responses API, what the OpenAI Agents SDK speaks) on the chat path.

A request becomes chat messages and tools: ``instructions`` is the system message, input
items are messages (``input_text`` / ``output_text`` parts joined), ``function_call`` items
are the assistant's tool calls and ``function_call_output`` items are ``tool`` messages.
The chat answer becomes the Response object the SDK parses: a ``message`` item with its
``output_text`` and a ``function_call`` item per tool call.

``previous_response_id`` continues a response of the same episode: its input (without its
``instructions``, as OpenAI does) and its output come before the new input. Responses are
kept per episode and forgotten with it, so one episode can never continue another's.
"""

# No ``from __future__ import annotations`` here: pydantic reads these annotations at run time.
import time
import uuid
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict

from memrl.gateway.adapters import arguments, function_tool, joined_text, positive, refuse_unknown, stored_message
from memrl.gateway.requests import bad
from memrl.gateway.sessions import Session
from memrl.serve.errors import APIError
from memrl.serve.fields import Count, Flag, Number

TEXT_PARTS = ("input_text", "output_text", "text")
LOGPROBS = "message.output_text.logprobs"  # the one ``include`` served: the sampled tokens' log-probs
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
# Fields that change nothing here, at these values (an empty tuple: any value).
NO_OPS: dict[str, tuple[Any, ...]] = {
    "include": ([], [LOGPROBS]), "truncation": ("disabled", "auto"), "text": ({"format": {"type": "text"}}, {}),
    "reasoning": ({},), "user": (), "safety_identifier": (), "prompt_cache_key": (), "prompt_cache_retention": (),
    "service_tier": ("auto", "default"), "background": (False,), "top_logprobs": (0,), "stream_options": (),
}
# Why a field is refused at any other value (the rest: "not supported by the training gateway's Responses API").
REFUSED: dict[str, str] = {
    "include": f"only {LOGPROBS!r} is served here (the sampled tokens' log-probs)",
    "top_logprobs": "only the sampled token's log-prob is recorded (ask for 0)",
    "text": "structured output (text.format json_object, json_schema) needs constrained decoding, which the "
            "training gateway does not do",
    "reasoning": "the policy's chat template decides how it reasons; leave it out",
}


class ResponsesBody(BaseModel):
    # Extra fields are kept so that refuse_unknown can name them; none is ignored silently.
    model_config = ConfigDict(extra="allow")
    model: Optional[str] = None
    input: Union[str, list[Any]]
    instructions: Optional[str] = None
    tools: Optional[list[Any]] = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: Optional[Flag] = None
    previous_response_id: Optional[str] = None
    max_output_tokens: Optional[Count] = None
    temperature: Optional[Number] = None
    top_p: Optional[Number] = None
    stream: Optional[Flag] = False
    store: Optional[Flag] = None
    metadata: Optional[dict[str, Any]] = None


def check(body: ResponsesBody) -> tuple[Optional[Count], bool]:
    """What a training call cannot honour, refused by name; (the max output tokens the program asked for,
    whether it asked for the output text's log-probs)."""
    refuse_unknown(body, NO_OPS, "Responses API", REFUSED)
    return positive(body.max_output_tokens, "max_output_tokens"), LOGPROBS in ((body.model_extra or {}).get("include") or [])


def tools_of(body: ResponsesBody) -> Optional[list[dict[str, Any]]]:
    """The request's function tools in chat form (None: none); ``tool_choice: "none"`` keeps them in the prompt
    (vLLM's Responses path does, unless ``--exclude-tools-when-tool-choice-none``) and leaves the answer
    unparsed."""
    choice = body.tool_choice
    if choice is not None and choice not in ("auto", "none"):
        raise bad("tool_choice", "a required or named tool needs constrained decoding, which the training gateway "
                  "does not do; send 'auto' or 'none'", "unsupported")
    out = []
    for i, tool in enumerate(body.tools or []):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad(f"tools[{i}].type", f"only function tools are supported, not {str(kind)[:40]!r} (hosted "
                      "tools run at OpenAI)", "unsupported")
        out.append(function_tool(tool.get("name"), tool.get("description"), tool.get("parameters"), f"tools[{i}]"))
    return out or None


def input_messages(body: ResponsesBody) -> list[dict[str, Any]]:
    """The input items as chat messages (no ``instructions``: those are not carried to a later response)."""
    items = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    if not items:
        raise bad("input", "must not be empty")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        _item(item, f"input[{i}]", out)
    return out


def _item(item: Any, where: str, out: list[dict[str, Any]]) -> None:
    if not isinstance(item, dict):
        raise bad(where, "an input item must be an object")
    kind = item.get("type", "message")
    if kind == "message":
        given = item.get("role")
        role = ROLES.get(given) if isinstance(given, str) else None  # a list or object: the caller's 400, not a 503
        if role is None:
            raise bad(f"{where}.role", f"must be one of {', '.join(ROLES)}")
        out.append({"role": role, "content": joined_text(item.get("content"), f"{where}.content", TEXT_PARTS)})
    elif kind == "function_call":
        call_id, name = item.get("call_id"), item.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str) or not name:
            raise bad(where, "a function_call item needs call_id and name strings")
        call = {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": arguments(item.get("arguments", "{}"), f"{where}.arguments")}}
        if out and out[-1]["role"] == "assistant":  # the text and the calls of one answer are one turn
            out[-1].setdefault("tool_calls", []).append(call)
        else:
            out.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise bad(f"{where}.call_id", "must be the call_id of the function_call it answers")
        text = joined_text(item.get("output"), f"{where}.output", TEXT_PARTS)
        out.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
    else:
        raise bad(f"{where}.type", f"{str(kind)[:40]!r} items are not supported (message, function_call and "
                  "function_call_output are)", "unsupported")


def chat_request(session: Session, body: ResponsesBody) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the chat messages of this call, its history to keep): the chained response's, then this input."""
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        kept = session.responses.get(body.previous_response_id)
        if kept is None:
            raise bad("previous_response_id", f"no stored response {body.previous_response_id[:60]!r} in this "
                      "episode (responses are kept for the episode that made them, unless store is false)",
                      "previous_response_not_found")
        history = list(kept)
    history += input_messages(body)
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    return system + history, history


def response_object(answer: dict[str, Any], body: ResponsesBody, session: Session,
                    history: list[dict[str, Any]]) -> dict[str, Any]:
    """The Response the SDK parses, from the chat answer; kept for ``previous_response_id`` unless store is false.

    An answer cut at the token budget is ``completed`` with ``incomplete_details.reason: max_output_tokens``
    (OpenAI says ``incomplete``): while training, a long answer is the policy's answer to be rewarded, and the
    Agents SDK raises on an ``incomplete`` response, which would discard the episode instead.
    """
    choice = answer["choices"][0]
    message = choice["message"]
    resp_id = f"resp_{uuid.uuid4().hex}"
    output: list[dict[str, Any]] = []
    if message.get("content") or not message.get("tool_calls"):
        output.append({"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed",
                       "role": "assistant", "content": [{"type": "output_text", "text": message.get("content") or "",
                                                         "annotations": [], "logprobs": _logprobs(choice)}]})
    for call in message.get("tool_calls") or []:
        output.append({"type": "function_call", "id": "fc_" + call["id"].removeprefix("call_"), "call_id": call["id"],
                       "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                       "status": "completed"})
    cut = choice["finish_reason"] == "length"
    usage = answer["usage"]
    resp = {
        "id": resp_id, "object": "response", "created_at": int(time.time()), "model": answer["model"],
        "status": "completed",  # even when cut: see response_object's docstring
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": None,
        "instructions": body.instructions, "output": output, "previous_response_id": body.previous_response_id,
        "tools": body.tools or [], "tool_choice": body.tool_choice or "auto",
        "parallel_tool_calls": body.parallel_tool_calls is not False, "temperature": body.temperature,
        "top_p": body.top_p, "max_output_tokens": body.max_output_tokens, "metadata": body.metadata or {},
        "store": body.store is not False, "text": {"format": {"type": "text"}}, "truncation": "disabled",
        "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                  "total_tokens": usage["total_tokens"], "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }
    if body.store is not False:
        session.responses[resp_id] = [*history, stored_message(message)]
        session.response_objects[resp_id] = resp
    return resp


def _logprobs(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer's tokens with their log-probs (chat's entries: token, logprob, bytes, no alternatives), when
    ``include`` asked for them; else none, as OpenAI leaves them out."""
    return list((choice.get("logprobs") or {}).get("content") or [])


def stored(session: Session, resp_id: str) -> dict[str, Any]:
    """A response this episode stored (``client.responses.retrieve``); OpenAI's 404 otherwise."""
    resp = session.response_objects.get(resp_id)
    if resp is None:
        raise APIError(404, f"Response with id {resp_id[:60]!r} not found (responses are kept for the episode "
                       "that made them, unless store is false).", code="not_found", param="response_id")
    return resp


def delete(session: Session, resp_id: str) -> dict[str, Any]:
    """``client.responses.delete``: forgotten for retrieve and for ``previous_response_id``."""
    stored(session, resp_id)
    del session.response_objects[resp_id]
    session.responses.pop(resp_id, None)
    return {"id": resp_id, "object": "response", "deleted": True}
