"""``stream: true``: each API's server-sent events, made from a call that was generated whole.

A streamed call is generated and recorded exactly as the same call unstreamed (the
episode's conversation cannot tell them apart); its answer is then sent as the events its
API defines: chat completion chunks or text completion chunks (``/v1/completions``), each
ending in ``data: [DONE]``, the Responses API's
``response.*`` events, or the Messages API's ``message_start`` ... ``message_stop``. The text
arrives token by token (the recorded tokens' decoding, see :func:`~memrl.serve.streaming.token_spans`), a
character split over tokens in one piece; a tool call's arguments arrive in one delta. With vLLM's
``stream_options.continuous_usage_stats`` every chunk also carries the usage up to it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memrl.serve.streaming import Span, aligned_spans, continuous_usage, sse_data, usage_so_far
from memrl.serve.streaming import stream_usage as serve_stream_usage


@dataclass(frozen=True)
class Usage:
    """What a streamed chat or text completion says of its usage (``stream_options``, checked as OpenAI does):
    ``final``, a last chunk with the call's usage (``include_usage``); ``running``, vLLM's
    ``continuous_usage_stats``: every chunk also carries the usage up to it."""

    final: bool = False
    running: bool = False


def stream_usage(options: Any, stream: bool) -> Usage:
    """``stream_options`` read and checked (a 400 naming the bad key or value)."""
    final = serve_stream_usage(options, stream)
    return Usage(final, final and continuous_usage(options))


def _chunker(answer: dict[str, Any], kind: str, usage: Usage) -> Callable[[dict[str, Any], int | None], dict]:
    """Makes one chunk of ``answer`` from its choice's fields and the tokens it has given so far (None: all)."""
    head = {"id": answer["id"], "object": kind, "created": answer["created"], "model": answer["model"]}

    def chunk(choice: dict[str, Any], upto: int | None) -> dict[str, Any]:
        out = {**head, "choices": [{"index": 0, **choice}]}
        if usage.running:  # as vLLM: the first chunk says 0 tokens, the finishing one all of them
            out["usage"] = usage_so_far(answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"], upto)
        elif usage.final:
            out["usage"] = None
        return out

    return chunk


def _finish(answer: dict[str, Any], chunks: list[dict[str, Any]], usage: Usage) -> list[str]:
    if usage.final:
        chunks.append({**{k: chunks[0][k] for k in ("id", "object", "created", "model")}, "choices": [],
                       "usage": answer["usage"]})
    return [sse_data(c) for c in chunks] + ["data: [DONE]\n\n"]


def _last(choice: dict[str, Any]) -> dict[str, Any]:
    """What the finishing chunk carries beside the finish reason (the recorded log-probs and ids, when asked)."""
    return {k: choice[k] for k in ("logprobs", "stop_reason", "token_ids", "prompt_token_ids")
            if choice.get(k) is not None}


def chat_events(answer: dict[str, Any], spans: Sequence[Span], usage: Usage) -> list[str]:
    """A chat completion as ``chat.completion.chunk`` events: role, text pieces, tool calls, finish (, usage).

    ``spans``: the generated tokens' text piece by piece, each with the count of tokens it ends at
    (:func:`~memrl.serve.streaming.token_spans`)."""
    choice = answer["choices"][0]
    message = choice["message"]
    chunk = _chunker(answer, "chat.completion.chunk", usage)

    def delta(body: dict[str, Any], upto: int | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return chunk({"delta": body, "logprobs": None, "finish_reason": finish, **extra}, upto)

    # a tool-call-only answer's content is null, streamed or not (OpenAI's first chunk says so too)
    chunks = [delta({"role": "assistant", "content": "" if message.get("content") is not None else None}, 0)]
    chunks += [delta({"content": p}, end) for p, end in aligned_spans(spans, message.get("content") or "")]
    chunks += [delta({"tool_calls": [{"index": k, **call}]}, None)
               for k, call in enumerate(message.get("tool_calls") or [])]
    chunks.append(delta({}, None, choice["finish_reason"], **_last(choice)))
    return _finish(answer, chunks, usage)


def completion_events(answer: dict[str, Any], spans: Sequence[Span], usage: Usage) -> list[str]:
    """A text completion as OpenAI's streamed ``text_completion`` chunks: text pieces, finish (, usage).

    Every chunk carries the answer's id; the log-probs and token ids the program asked for come
    whole on the finishing chunk (as :func:`chat_events` does), so they are the recorded ones.
    """
    choice = answer["choices"][0]
    chunk = _chunker(answer, "text_completion", usage)

    def text(piece: str, upto: int | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return chunk({"text": piece, "logprobs": None, "finish_reason": finish, **extra}, upto)

    chunks = [text(p, end) for p, end in aligned_spans(spans, choice.get("text") or "")]
    chunks.append(text("", None, choice["finish_reason"], **_last(choice)))
    return _finish(answer, chunks, usage)


def _emitter(events: list[str], numbered: bool) -> Callable[..., None]:
    seq = itertools.count()

    def emit(kind: str, **data: Any) -> None:
        payload = {"type": kind, **({"sequence_number": next(seq)} if numbered else {}), **data}
        events.append(f"event: {kind}\n{sse_data(payload)}")

    return emit


def responses_events(resp: dict[str, Any], spans: Sequence[Span]) -> list[str]:
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
            for piece, logprobs in _with_logprobs(spans, part["text"], part["logprobs"]):
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


def _with_logprobs(spans: Sequence[Span], text: str, logprobs: Sequence[Any]) -> list[tuple[str, list[Any]]]:
    """The deltas that spell ``text``, each with the log-probs of the tokens it decodes (none asked: empty): a
    character split over tokens comes with all of them; the last delta also carries every token left (a stop
    token, which prints nothing)."""
    kept = aligned_spans(spans, text)
    out, start = [], 0
    for k, (piece, stop) in enumerate(kept):
        end = len(logprobs) if k == len(kept) - 1 else stop
        out.append((piece, list(logprobs[start:end])))
        start = end
    return out


def messages_events(message: dict[str, Any], spans: Sequence[Span]) -> list[str]:
    """A Message as the Messages API's events: message_start, each block's start/deltas/stop, message_delta, stop."""
    events: list[str] = []
    emit = _emitter(events, numbered=False)
    usage = message["usage"]
    emit("message_start", message={**message, "content": [], "stop_reason": None, "stop_sequence": None,
                                   "usage": {**usage, "output_tokens": 0}})
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            emit("content_block_start", index=i, content_block={"type": "text", "text": ""})
            for piece, _ in aligned_spans(spans, block["text"]):
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
