"""Request bodies of ``memrl serve``: every field is honoured or refused with a 400.

OpenAI's and vLLM's bodies carry many fields. A client that sends one this
server does not implement (``best_of: 4``, ``logit_bias``, ``echo: true``,
``tools``, a misspelt ``max_token``) must not get an answer that silently
ignored it, so unknown fields are refused by name. A field whose value changes
nothing (``echo: false``, ``best_of: 1``, ``logit_bias: {}``, penalties of 0,
``null``) is accepted. ``user`` (an end-user id for a provider's abuse
monitoring) is accepted because it never changes an answer.

Honoured, beside the sampling fields: ``stop`` (strings; the completion is cut
before the first one, ``finish_reason: "stop"``), ``stop_token_ids``,
``ignore_eos``, ``logprobs`` / ``top_logprobs`` (the sampled token's log-prob and
the most likely alternatives), ``skip_special_tokens``, ``add_special_tokens``
(text prompts of ``/v1/completions``), ``return_token_ids``,
``return_tokens_as_token_ids``.
"""

# No ``from __future__ import annotations`` here: pydantic reads these annotations at run time.
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, StrictBool

from memrl.serve.errors import APIError

MAX_TOP_LOGPROBS = 20  # vLLM's default cap
MAX_STOP_STRINGS = 16

# Fields accepted only at a value that changes nothing (null is accepted too).
_NO_OP_VALUES: dict[str, tuple[Any, ...]] = {
    "echo": (False,), "best_of": (1,), "logit_bias": ({},), "frequency_penalty": (0,), "presence_penalty": (0,),
    "repetition_penalty": (1,), "min_p": (0,), "min_tokens": (0,), "suffix": ("",), "tools": ([],),
    "functions": ([],), "tool_choice": ("none",), "function_call": ("none",), "response_format": ({"type": "text"},),
    "stream_options": (), "parallel_tool_calls": (), "include_stop_str_in_output": (False,),
    "add_generation_prompt": (True,), "continue_final_message": (False,), "store": (False,),
}
_ALWAYS_ACCEPTED = {"user"}


def _not_bool_or_text(value: Any) -> Any:
    """A JSON number only: OpenAI answers ``max_tokens: true`` or ``"n": "2"`` with a 400 (pydantic's lax mode
    would read them as 1 and 2 and sample something the client did not ask for)."""
    if isinstance(value, (bool, str)):
        raise ValueError(f"must be a number, not a {'boolean' if isinstance(value, bool) else 'string'}")
    return value


Count = Annotated[int, BeforeValidator(_not_bool_or_text)]  # 3 and 3.0 are 3; true and "3" are 400s
Number = Annotated[float, BeforeValidator(_not_bool_or_text)]
Flag = StrictBool  # true or false only: "false" is not false


class RequestBody(BaseModel):
    # Extra fields are kept so that reject_unsupported can name them; none is ever ignored silently.
    model_config = ConfigDict(extra="allow")
    model: Optional[str] = None
    max_tokens: Optional[Count] = 16
    temperature: Optional[Number] = 1.0
    top_p: Optional[Number] = 1.0
    top_k: Optional[Count] = -1
    seed: Optional[Count] = None
    n: Optional[Count] = 1
    stop: Union[str, list[Any], None] = None
    stop_token_ids: Optional[list[Any]] = None
    ignore_eos: Flag = False
    logprobs: Any = None
    return_tokens_as_token_ids: Flag = False
    return_token_ids: Flag = False
    skip_special_tokens: Flag = True
    stream: Optional[Flag] = False


class CompletionBody(RequestBody):
    prompt: Union[str, list[Any]]
    add_special_tokens: Flag = True  # as vLLM: a text prompt of /v1/completions gets the BOS a tokenizer adds


class ChatBody(RequestBody):
    messages: list[dict[str, Any]]
    max_tokens: Optional[Count] = None  # unset: what is left of the window (vLLM's and OpenAI's chat; not 16)
    max_completion_tokens: Optional[Count] = None
    top_logprobs: Optional[Count] = None


def _bad(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", code="invalid_value", param=param)


def same_value(value: Any, ok: Any) -> bool:
    """Equal, where a boolean equals only the same boolean (``best_of: true`` is not 1, ``store: 0`` not false)."""
    if isinstance(value, bool) or isinstance(ok, bool):
        return value is ok
    return bool(value == ok)


def reject_unsupported(body: RequestBody) -> None:
    """A 400 naming the first field this server would otherwise have ignored."""
    for key, value in (body.model_extra or {}).items():
        if key in _ALWAYS_ACCEPTED or value is None:
            continue
        allowed = _NO_OP_VALUES.get(key)
        if allowed is not None and any(same_value(value, ok) for ok in allowed):
            continue
        only = f" (accepted only as {', '.join(repr(v) for v in allowed)} or null)" if allowed else ""
        raise APIError(400, f"{key[:100]}: not supported by memrl serve{only}", code="unsupported", param=key[:100])


def stop_strings(body: RequestBody) -> list[str]:
    """``stop`` as a list of non-empty strings (at most MAX_STOP_STRINGS)."""
    raw = body.stop
    items = [raw] if isinstance(raw, str) else list(raw or [])
    if len(items) > MAX_STOP_STRINGS:
        raise _bad("stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(items)}")
    for i, s in enumerate(items):
        if not isinstance(s, str) or not s:
            raise _bad("stop", f"stop[{i}] must be a non-empty string")
    return items


def _count(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise _bad(param, f"must be an integer between 0 and {MAX_TOP_LOGPROBS}")
    return value


def completion_logprobs(body: CompletionBody) -> Optional[int]:
    """``logprobs`` of ``/v1/completions``: None (no block) or how many alternatives per token."""
    return None if body.logprobs is None else _count(body.logprobs, "logprobs")


def chat_logprobs(body: ChatBody) -> Optional[int]:
    """``logprobs`` / ``top_logprobs`` of ``/v1/chat/completions``: None (no block) or alternatives per token."""
    if body.logprobs is not None and not isinstance(body.logprobs, bool):
        raise _bad("logprobs", "must be true or false")
    top = None if body.top_logprobs is None else _count(body.top_logprobs, "top_logprobs")
    if top and not body.logprobs:
        raise _bad("top_logprobs", "needs logprobs: true")
    return (top or 0) if body.logprobs else None


def cut_at_stop(decode: Callable[[Sequence[int]], str], ids: Sequence[int],
                stops: Sequence[str]) -> Optional[tuple[int, str, str]]:
    """(tokens kept, text, the stop string met) when the decoded completion holds a stop string, else None.

    The kept tokens are the fewest whose text contains a stop string (as a server that
    checks after each token stops there); the text ends before the first stop string in it.
    """
    if not stops or not any(s in decode(ids) for s in stops):
        return None
    lo, hi = 1, len(ids)
    while lo < hi:  # the text of a longer prefix holds every stop string a shorter one does
        mid = (lo + hi) // 2
        if any(s in decode(ids[:mid]) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    text = decode(ids[:lo])
    at, met = min((text.find(s), s) for s in stops if s in text)
    return lo, text[:at], met
