"""``stream: true`` on ``memrl serve``: the answer as OpenAI's server-sent events, and the token-by-token text.

The engines generate a choice whole (they have no per-token callback), so the events of a request are
sent once its generation is done: what a client that always streams (many agent frameworks) needs to
work, not earlier first tokens. Each choice is sent as OpenAI sends it: ``chat.completion.chunk`` (or
``text_completion``) chunks, a first one with the role, one per decoded piece of text carrying the
log-probs of the tokens it decodes (when asked for), a last one with the finish reason, the choice's
``token_ids`` (and ``prompt_token_ids`` when asked for) and the log-probs of any token that printed no
text (a stop token); with ``stream_options.include_usage`` a final chunk with the usage; then
``data: [DONE]``. Joined, the pieces are exactly the text ``stream: false`` returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from memrl.serve.errors import APIError

Span = tuple[str, int]  # a piece of text and the index just past the last token it decodes


MAX_PENDING = 8  # tokens a character may wait for its last byte (UTF-8 needs at most 4): past it, sent as decoded


def token_spans(tokenizer: Any, ids: Sequence[int], skip_special: bool = True) -> list[Span]:
    """The decoding of ``ids`` split token by token, each piece with the end of the tokens it decodes.

    A character split over tokens waits for its last byte (at most :data:`MAX_PENDING` tokens). Incremental, as
    vLLM detokenizes: each step decodes a short window (the last piece's tokens, as context, and those not
    printed yet), and a skipped special token never enters it, so the cost stays linear even over a long run
    of tokens that print nothing (a degenerate policy's). Joined, the pieces are exactly ``decode(ids)``; if a
    tokenizer breaks that, the whole text is one piece.
    """
    def decode(part: Sequence[int]) -> str:
        return str(tokenizer.decode(list(part), skip_special_tokens=skip_special))

    skipped = set(getattr(tokenizer, "all_special_ids", ()) or ()) if skip_special else set()
    spans: list[Span] = []
    window: list[int] = []  # the last piece's tokens (context), then those not printed yet
    context = 0
    for i, token in enumerate(ids, 1):
        if token in skipped:
            continue
        window.append(token)
        before, now = decode(window[:context]), decode(window)
        waiting = now.endswith("\ufffd") and len(window) - context < MAX_PENDING
        if len(now) > len(before) and not waiting:
            spans.append((now[len(before):], i))
            window = window[context:]
            context = len(window)
    whole = decode(ids)
    joined = "".join(p for p, _ in spans)
    if joined != whole:
        return [(whole, len(ids))] if whole else []
    return spans + ([(whole[len(joined):], len(ids))] if len(whole) > len(joined) else [])


def aligned_spans(spans: Sequence[Span], text: str) -> list[Span]:
    """The spans that spell ``text`` from its start, and the rest of ``text`` (cut at a stop string, or decoded
    otherwise) as one last piece that owns no further token."""
    out: list[Span] = []
    at, end = 0, 0
    for piece, stop in spans:
        if not piece or not text.startswith(piece, at):
            break
        out.append((piece, stop))
        at, end = at + len(piece), stop
    if at < len(text):
        out.append((text[at:], end))
    return out


def stream_usage(options: Any, stream: bool,
                 accepted: tuple[str, ...] = ("include_usage", "include_obfuscation", "continuous_usage_stats")) -> bool:
    """Whether the stream ends with a usage chunk (``stream_options.include_usage``); checked as OpenAI does.

    ``accepted``: the keys taken. ``continuous_usage_stats`` is vLLM's (:func:`continuous_usage`);
    ``include_obfuscation``, OpenAI's padding of stream events against side channels, changes no token and is
    accepted without acting on it, so clients that always send it keep working."""
    if options is None:
        return False
    if not stream:
        raise APIError(400, "stream_options: only with stream: true", code="invalid_value", param="stream_options")
    if not isinstance(options, dict) or any(k not in accepted for k in options):
        raise APIError(400, f"stream_options: accepted keys: {', '.join(accepted)}", code="unsupported",
                       param="stream_options")
    for key in ("include_usage", "continuous_usage_stats"):
        if options.get(key) is not None and not isinstance(options[key], bool):  # "false" would read as true
            raise APIError(400, f"stream_options.{key}: must be true or false", code="invalid_value",
                           param=f"stream_options.{key}")
    return bool(options.get("include_usage"))


def continuous_usage(options: Any) -> bool:
    """vLLM's ``stream_options.continuous_usage_stats`` (with ``include_usage``): every chunk carries the usage so
    far, its choice's completion tokens up to that chunk. Call after :func:`stream_usage` has checked ``options``."""
    return isinstance(options, dict) and bool(options.get("include_usage")) and bool(
        options.get("continuous_usage_stats"))


def usage_so_far(prompt: int, total: int, upto: int | None) -> dict[str, int]:
    """The usage a chunk carries under :func:`continuous_usage`: its choice's tokens up to it (None: all of them)."""
    done = total if upto is None else min(upto, total)
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


def events(answer: dict[str, Any], pieces: Sequence[list[Span]], include_usage: bool,
           running: Sequence[tuple[int, int]] | None = None) -> Iterator[str]:
    """``answer`` (a chat or text completion, as ``stream: false`` returns it) as server-sent events.

    ``pieces[i]``: choice i's text spans (:func:`token_spans`, aligned to its text). ``running[i]``: choice i's
    (prompt tokens, completion tokens); given, every chunk carries the usage up to it (:func:`continuous_usage`)."""
    chat = answer["object"] == "chat.completion"
    head = {"id": answer["id"], "object": "chat.completion.chunk" if chat else "text_completion",
            "created": answer["created"], "model": answer["model"]}
    tail = {"usage": None} if include_usage else {}
    for i, (choice, spans) in enumerate(zip(answer["choices"], pieces)):
        for body, upto in (_chat_choice if chat else _completion_choice)(choice, spans):
            chunk = {**head, "choices": [{"index": choice["index"], **body}], **tail}
            if running is not None:
                chunk["usage"] = usage_so_far(*running[i], upto)
            yield sse_data(chunk)
    if include_usage:
        yield sse_data({**head, "choices": [], "usage": answer["usage"]})
    yield "data: [DONE]\n\n"


Chunk = tuple[dict[str, Any], "int | None"]  # a choice's chunk, and the tokens it has given so far (None: all)


def _chat_choice(choice: dict[str, Any], spans: Sequence[Span]) -> Iterator[Chunk]:
    entries = (choice.get("logprobs") or {}).get("content")
    yield {"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}, 0
    start = 0
    for piece, end in spans:
        logprobs = None if entries is None else {"content": entries[start:end]}
        yield {"delta": {"content": piece}, "logprobs": logprobs, "finish_reason": None}, end
        start = max(start, end)
    rest = None if entries is None else {"content": entries[start:]}
    yield {"delta": {}, "logprobs": rest, "finish_reason": choice["finish_reason"], **_ids(choice)}, None


def _completion_choice(choice: dict[str, Any], spans: Sequence[Span]) -> Iterator[Chunk]:
    block = choice.get("logprobs")
    start = 0
    for piece, end in spans:
        yield {"text": piece, "logprobs": _slice(block, start, end), "finish_reason": None}, end
        start = max(start, end)
    yield {"text": "", "logprobs": _slice(block, start, None), "finish_reason": choice["finish_reason"],
           **_ids(choice)}, None


def _slice(block: dict[str, Any] | None, start: int, end: int | None) -> dict[str, Any] | None:
    return None if block is None else {key: values[start:end] for key, values in block.items()}


def _ids(choice: dict[str, Any]) -> dict[str, Any]:
    """What a choice's last chunk carries beside its finish reason (vLLM's fields)."""
    return {key: choice[key] for key in ("stop_reason", "token_ids", "prompt_token_ids") if key in choice}


def sse_data(payload: Any) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
