"""One model call of an episode, run on the episode's own event loop.

The request was checked for shape by the HTTP side (:mod:`memrl.gateway.requests`); here
the prompt is tokenized (chat messages with the tokenizer's template and ``tools=``, text
without special tokens, or ids as given), fitted to the model's window, and generated
through :meth:`Episode.generate`, which records it as a conversation (prompt ids, generated
ids, sampling log-probs). The answer is built from exactly those ids: the text is their
decoding (cut at a ``stop`` string if the program gave one; the recorded tokens are what
was sampled), tool calls are parsed from it, and the log-probs are the recorded ones.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memrl.engines.base import EngineDeadError, GenerationResult
from memrl.io.json_strings import json_strings
from memrl.gateway.sessions import Session
from memrl.gateway.tool_parser import split_tool_calls
from memrl.serve.answers import Answers
from memrl.serve.errors import APIError
from memrl.serve.limits import ServeLimits, check_token_ids, check_window, model_window, parse_prompts
from memrl.text.tokens import chat_ids
from memrl.workflows.api import OFF_LOOP_CHARS, prompt_chars
from memrl.workflows.common import anchor

TOOL_CHARS = 1024  # what one tool's schema costs to render, in characters (for choosing to render off the loop)

_BIG = 10**9
_token_bytes: dict[int, tuple[Any, int]] = {}


@dataclass
class CallRequest:
    """What one request asks of the model, in terms the episode understands."""

    kind: str  # "chat" or "completion"
    prompt: Any  # chat messages, or the raw ``prompt`` of /v1/completions
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    overrides: dict[str, float] = field(default_factory=dict)
    stops: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special: bool = True
    logprobs: int | None = None  # None: no log-prob block
    as_ids: bool = False
    return_token_ids: bool = False
    add_special_tokens: bool = False
    model: str = "policy"
    parallel_tool_calls: bool = True  # False: answer with the first parsed call only (vLLM's behaviour)
    parse_tools: bool = True  # False (tool_choice none): the tools are in the prompt, the answer is text
    continue_final: bool = False  # the last message is the assistant's prefill: generation continues it


def limits_for(engine: Any, tokenizer: Any) -> ServeLimits:
    """The model's window and vocabulary: from the engine's model config, else the tokenizer."""
    model = getattr(engine, "model", None)
    if model is not None and model_window(model) is not None:
        return ServeLimits.for_model(model)
    window = getattr(tokenizer, "model_max_length", None)
    window = window if isinstance(window, int) and 0 < window < 10**8 else _BIG
    return ServeLimits(max_model_len=window, vocab_size=len(tokenizer))


def max_token_bytes(tokenizer: Any) -> int:
    """The most UTF-8 bytes one token can spell (4 per character of its longest vocabulary entry)."""
    cached = _token_bytes.get(id(tokenizer))
    if cached is None or cached[0] is not tokenizer:
        cached = (tokenizer, 4 * max(map(len, tokenizer.get_vocab()), default=1))
        _token_bytes[id(tokenizer)] = cached
    return cached[1]


def completion_budget(prompt_len: int, asked: int | None, ceiling: int, limits: ServeLimits) -> int:
    """New tokens for this call: what the program asked (at most the gateway's ceiling), else what fits.

    An explicit request that cannot fit the window is refused as a server would refuse it;
    the default is cut to what is left of the window, as vLLM does when ``max_tokens`` is unset.
    """
    if asked is not None:
        check_window(prompt_len, asked, limits)
        return min(asked, ceiling)
    left = limits.max_model_len - prompt_len
    if left < 1:
        check_window(prompt_len, 1, limits)
    return min(ceiling, left)


def encode_prompt(session: Session, req: CallRequest, limits: ServeLimits) -> list[int]:
    """The prompt's token ids (a 400 for what cannot be rendered or cannot fit)."""
    ep = session.episode
    if req.kind == "chat":
        for field, items in (("messages", req.prompt), ("tools", req.tools or [])):
            if len(items) > limits.max_model_len:  # each renders to a token at least: cannot fit, need not render
                raise APIError(400, f"{field}: {len(items)} of them cannot fit in {limits.max_model_len} tokens (this "
                               "model's maximum context length)", code="context_length_exceeded", param=field)
        size = sum(len(t.encode("utf-8", "surrogatepass")) for t in json_strings(req.prompt, max_depth=32))
        if size > limits.max_model_len * max_token_bytes(ep.tokenizer):
            raise APIError(400, f"messages: {size} bytes of text are more than {limits.max_model_len} tokens (this "
                           "model's maximum context length)", code="context_length_exceeded", param="messages")
        try:
            if req.continue_final:
                return chat_ids(ep.tokenizer, req.prompt, req.tools, continue_final=True)
            return ep.encode(req.prompt, req.tools)
        except Exception as exc:  # noqa: BLE001 - a template error is the request's, whatever it raises
            raise APIError(400, f"messages: cannot apply the chat template: {' '.join(str(exc).split())[:200]}",
                           code="invalid_value", param="messages") from None

    def encode(text: str) -> list[int]:
        if req.add_special_tokens:
            return list(ep.tokenizer.encode(text, add_special_tokens=True))
        return ep.encode(text)

    if isinstance(req.prompt, list) and len(req.prompt) > 1 and all(isinstance(p, (str, list)) for p in req.prompt):
        raise APIError(400, "prompt: one prompt per call while training", code="unsupported", param="prompt")
    return parse_prompts(req.prompt, encode, limits)[0]


async def render(session: Session, req: CallRequest, limits: ServeLimits) -> list[int]:
    """:func:`encode_prompt`, in a worker thread when the request is big: the episode loop is every episode's,
    and rendering megabytes (messages, tool-call arguments, tool schemas) on it stalled them all for seconds."""
    tools = req.tools or []
    work = prompt_chars(req.prompt) + TOOL_CHARS * len(tools) + sum(
        map(len, json_strings(tools, keys=True, max_depth=32)))
    if work > OFF_LOOP_CHARS:
        return await asyncio.to_thread(encode_prompt, session, req, limits)
    return encode_prompt(session, req, limits)


async def model_call(session: Session, req: CallRequest) -> dict[str, Any]:
    """Run ``req`` as one recorded call of the session's episode; the OpenAI response body."""
    ep = session.episode
    settings = session.settings
    limits = limits_for(ep.engine, ep.tokenizer)
    ids = await render(session, req, limits)
    budget = completion_budget(len(ids), req.max_tokens, settings.max_tokens, limits)
    check_token_ids(req.stop_token_ids, "stop_token_ids", limits.vocab_size)  # as memrl serve: in the vocabulary
    stops = None
    if req.stop_token_ids or req.ignore_eos:
        stops = [*req.stop_token_ids, *([] if req.ignore_eos else ep.stops)]
    overrides = req.overrides if settings.request_sampling else {}
    session.count_call()
    try:
        gen = await ep.generate(ids, max_new_tokens=budget, stop_token_ids=stops, merge=settings.merge,
                                state=anchor(req.prompt),  # gigpo's anchor: what the program sent
                                # the engine ends on a stop string in the text it reads, without special tokens
                                stop=req.stops if req.skip_special else (), **overrides)
    except ValueError as exc:  # the engine or the sampling parameters refused this request
        raise APIError(400, str(exc)[:300], code="invalid_value") from None
    except EngineDeadError as exc:
        session.fail(exc)
        raise APIError(503, "the model engine is gone; the run is stopping", code="engine_dead") from None
    except Exception as exc:  # noqa: BLE001 - the episode fails with it; the program gets a clear answer
        session.fail(exc)
        raise APIError(503, f"generation failed ({type(exc).__name__}); this episode will be discarded",
                       code="generation_failed") from None
    conv = getattr(gen, "conversation", None)
    if conv is not None:
        session.recorded.append(conv)  # call i's conversation: where a per-call reward for i goes
    if conv is not None and req.kind == "chat":
        conv.meta["messages"] = req.prompt
        if req.tools:
            conv.meta["tools"] = req.tools
    result = GenerationResult(gen.token_ids, gen.logprobs, gen.finish_reason)  # type: ignore[arg-type]
    answer = _answer(session, req, ids, result, ep.stops if stops is None else stops)
    if conv is not None:
        _drop_after_stop(conv, len(result.token_ids) - answer["usage"]["completion_tokens"])
        # what the program was told: a stop string ends the answer even where the engine ran on to its budget
        conv.meta["finish"] = "length" if answer["choices"][0]["finish_reason"] == "length" else "stop"
    return answer


def _drop_after_stop(conv: Any, extra: int) -> None:
    """Train only what the program saw: tokens sampled past a stop string (a server stops there) leave the
    recorded conversation. Cutting a sample after the fact leaves what came before distributed as sampled."""
    if extra > 0:
        conv.token_ids, conv.loss_mask, conv.logprobs = (conv.token_ids[:-extra], conv.loss_mask[:-extra],
                                                         conv.logprobs[:-extra])


def _answer(session: Session, req: CallRequest, prompt: list[int], res: GenerationResult,
            stop_ids: Sequence[int]) -> dict[str, Any]:
    answers = Answers(session.episode.tokenizer)
    res, text = answers.finished(res, req.skip_special, req.stops, stop_ids)
    usage = {"prompt_tokens": len(prompt), "completion_tokens": len(res.token_ids),
             "total_tokens": len(prompt) + len(res.token_ids)}
    head = {"created": int(time.time()), "model": req.model, "usage": usage}
    choice: dict[str, Any] = {"index": 0, "finish_reason": res.finish_reason, "logprobs": None,
                              "stop_reason": res.meta.get("stop_reason")}  # vLLM's: the stop string or token met
    if req.return_token_ids:
        choice["token_ids"] = res.token_ids
        choice["prompt_token_ids"] = prompt
    if req.kind == "completion":
        choice["text"] = text
        if req.logprobs is not None:
            choice["logprobs"] = answers.completion_logprobs(res, 0, req.as_ids)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", **head, "choices": [choice]}
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if req.tools and req.parse_tools and session.settings.tool_parser is not None:
        split = split_tool_calls(text, session.settings.tool_parser)
        session.invalid_tool_calls += split.invalid
        if split.tool_calls:
            calls = split.tool_calls if req.parallel_tool_calls else split.tool_calls[:1]
            message = {"role": "assistant", "content": split.content, "tool_calls": calls}
            choice["finish_reason"] = "tool_calls"
    choice["message"] = message
    if req.logprobs is not None:
        choice["logprobs"] = answers.chat_logprobs(res, 0, req.as_ids)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", **head, "choices": [choice]}
