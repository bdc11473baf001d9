"""``stream: true``: each API's server-sent events, made from a call that was generated whole.

A streamed call is generated and recorded exactly as the same call unstreamed (the
episode's conversation cannot tell them apart); its answer is then sent as the events its
API defines: chat completion chunks or text completion chunks (``/v1/completions``), each
ending in ``data: [DONE]``, the Responses API's
``response.*`` events, or the Messages API's ``message_start`` ... ``message_stop``. The text
arrives token by token (the recorded tokens' decoding, see :func:`~memrl.serve.streaming.token_pieces`);
a tool call's arguments arrive in one delta.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

from memrl.serve.streaming import aligned, aligned_spans, sse_data
from memrl.serve.streaming import stream_usage as serve_stream_usage


def stream_usage(options: Any, stream: bool) -> bool:
    """Whether a streamed chat completion ends with a usage chunk (``stream_options.include_usage``)."""
    return serve_stream_usage(options, stream)  # continuous_usage_stats is accepted and not acted on here


def chat_events(answer: dict[str, Any], pieces: Sequence[str], include_usage: bool) -> list[str]:
    """A chat completion as ``chat.completion.chunk`` events: role, text pieces, tool calls, finish (, usage)."""
    choice = answer["choices"][0]
    message = choice["message"]
    head = {"id": answer["id"], "object": "chat.completion.chunk", "created": answer["created"],
            "model": answer["model"]}
    tail = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                     **extra}], **tail}

    # a tool-call-only answer's content is null, streamed or not (OpenAI's first chunk says so too)
    chunks = [chunk({"role": "assistant", "content": "" if message.get("content") is not None else None})]
    chunks += [chunk({"content": p}) for p in aligned(pieces, message.get("content") or "")]
    chunks += [chunk({"tool_calls": [{"index": k, **call}]}) for k, call in enumerate(message.get("tool_calls") or [])]
    last = {k: choice[k] for k in ("logprobs", "stop_reason", "token_ids", "prompt_token_ids")
            if choice.get(k) is not None}
    chunks.append(chunk({}, choice["finish_reason"], **last))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return [sse_data(c) for c in chunks] + ["data: [DONE]\n\n"]


def completion_events(answer: dict[str, Any], pieces: Sequence[str], include_usage: bool) -> list[str]:
    """A text completion as OpenAI's streamed ``text_completion`` chunks: text pieces, finish (, usage).

    Every chunk carries the answer's id; the log-probs and token ids the program asked for come
    whole on the finishing chunk (as :func:`chat_events` does), so they are the recorded ones.
    """
    choice = answer["choices"][0]
    head = {"id": answer["id"], "object": "text_completion", "created": answer["created"], "model": answer["model"]}
    tail = {"usage": None} if include_usage else {}

    def chunk(text: str, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                                     **extra}], **tail}

    chunks = [chunk(p) for p in aligned(pieces, choice.get("text") or "")]
    last = {k: choice[k] for k in ("logprobs", "stop_reason", "token_ids", "prompt_token_ids")
            if choice.get(k) is not None}
    chunks.append(chunk("", choice["finish_reason"], **last))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": answer["usage"]})
    return [sse_data(c) for c in chunks] + ["data: [DONE]\n\n"]


def _emitter(events: list[str], numbered: bool) -> Callable[..., None]:
    seq = itertools.count()

    def emit(kind: str, **data: Any) -> None:
        payload = {"type": kind, **({"sequence_number": next(seq)} if numbered else {}), **data}
        events.append(f"event: {kind}\n{sse_data(payload)}")

    return emit


def responses_events(resp: dict[str, Any], pieces: Sequence[str]) -> list[str]:
    """A Response as the Responses API's events: created, each output item's parts and deltas, completed."""
    events: list[str] = []
    emit = _emitter(events, numbered=True)
    start = {**resp, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    emit("response.created", response=start)
    emit("response.in_progress", response=start)
    for i, item in enumerate(resp["output"]):
        at = {"item_id": item["id"], "output_index": i}
        if item["type"] == "message":
            part = item["content"][0]
            emit("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "content": []})
            emit("response.content_part.added", **at, content_index=0, part={**part, "text": ""})
            for piece, logprobs in _with_logprobs(pieces, part["text"], part["logprobs"]):
                emit("response.output_text.delta", **at, content_index=0, delta=piece, logprobs=logprobs)
            emit("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=part["logprobs"])
            emit("response.content_part.done", **at, content_index=0, part=part)
        else:
            emit("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "arguments": ""})
            emit("response.function_call_arguments.delta", **at, delta=item["arguments"])
            emit("response.function_call_arguments.done", **at, arguments=item["arguments"], name=item["name"])
        emit("response.output_item.done", output_index=i, item=item)
    emit("response.completed" if resp["status"] == "completed" else "response.incomplete", response=resp)
    return events


def _with_logprobs(pieces: Sequence[str], text: str, logprobs: Sequence[Any]) -> list[tuple[str, list[Any]]]:
    """The deltas that spell ``text``, each with the log-probs of the tokens it holds (none asked: empty): a
    token's piece carries its own; a last piece that is the rest of the text carries every token left."""
    spans = aligned_spans([(piece, k + 1) for k, piece in enumerate(pieces)], text)
    out, start = [], 0
    for k, (piece, stop) in enumerate(spans):
        end = len(logprobs) if k == len(spans) - 1 else stop
        out.append((piece, list(logprobs[start:end])))
        start = end
    return out


def messages_events(message: dict[str, Any], pieces: Sequence[str]) -> list[str]:
    """A Message as the Messages API's events: message_start, each block's start/deltas/stop, message_delta, stop."""
    events: list[str] = []
    emit = _emitter(events, numbered=False)
    usage = message["usage"]
    emit("message_start", message={**message, "content": [], "stop_reason": None, "stop_sequence": None,
                                   "usage": {**usage, "output_tokens": 0}})
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            emit("content_block_start", index=i, content_block={"type": "text", "text": ""})
            for piece in aligned(pieces, block["text"]):
                emit("content_block_delta", index=i, delta={"type": "text_delta", "text": piece})
        else:
            emit("content_block_start", index=i, content_block={**block, "input": {}})
            emit("content_block_delta", index=i, delta={"type": "input_json_delta",
                                                        "partial_json": json.dumps(block["input"],
                                                                                   ensure_ascii=False)})
        emit("content_block_stop", index=i)
    emit("message_delta", delta={"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
         usage={"output_tokens": usage["output_tokens"]})
    emit("message_stop")
    return events
