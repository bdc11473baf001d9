"""Request bodies of the training gateway, checked before anything reaches the episode.

The bodies are ``memrl serve``'s (every field honoured or refused by name, see
:mod:`memrl.serve.fields`) plus what an agent program sends: ``tools``, ``tool_choice``,
``parallel_tool_calls``. A few fields mean something else while training and are refused
with the reason rather than ignored: ``seed`` (each call is seeded from the episode's
seed), ``top_k`` (the trainer's sampling decides it), ``n > 1`` (one episode is one chain
of calls), ``tool_choice: "required"`` or a named function (that needs constrained
decoding). The ``model`` name is not checked: every call goes to the policy being
trained, whatever name the program was written for.

Chat completions also get the fields frameworks send (LangChain's ``ChatOpenAI`` options,
the Agents SDK's chat model): those that never change an answer (``store``, ``metadata``,
``prompt_cache_key``, ...; :data:`CHAT_NO_OPS`) are accepted, and those that would change
what is sampled in a way the recorded log-probs do not show, or that need constrained
decoding, are refused with the reason (:data:`CHAT_REFUSED`): a framework that sets one
learns why at its first call instead of being trained on answers it did not ask for.

Messages are made ready for a Hugging Face chat template the way vLLM does it: text
content parts are joined, ``developer`` is a system message, and the arguments of an
assistant's earlier tool calls (a JSON string in the API) become objects.
"""

# No ``from __future__ import annotations`` here: pydantic reads these annotations at run time.
import math
from typing import Any, Optional, Union

from memrl.serve.chat_messages import bad, chat_messages  # noqa: F401  (chat_messages: the gateway's routes use it)
from memrl.serve.fields import ChatBody, CompletionBody, Flag, RequestBody, reject_unsupported, same_value
from memrl.serve.limits import GREEDY_BELOW


class GatewayChatBody(ChatBody):
    tools: Optional[list[Any]] = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: Optional[Flag] = None
    stream_options: Optional[dict[str, Any]] = None  # with stream: true (memrl.gateway.sse)


class GatewayCompletionBody(CompletionBody):
    pass


_SAMPLING = "changes the distribution tokens are sampled from; the trainer's sampling applies to every call"
# Chat-completion fields that change nothing here, at these values (an empty tuple: any value; null is accepted).
CHAT_NO_OPS: dict[str, tuple[Any, ...]] = {
    "user": (), "metadata": (), "store": (),  # store: OpenAI keeps the completion for its evals; nothing is kept
    "prompt_cache_key": (), "prompt_cache_retention": (), "safety_identifier": (),
    "service_tier": ("auto", "default"), "modalities": (["text"],), "response_format": ({"type": "text"},),
    "frequency_penalty": (0,), "presence_penalty": (0,), "repetition_penalty": (1,), "min_p": (0,),
    "min_tokens": (0,), "logit_bias": ({},), "functions": ([],), "function_call": ("none",), "echo": (False,),
    "best_of": (1,), "include_stop_str_in_output": (False,), "add_generation_prompt": (True,),
    "continue_final_message": (False,),
}
# Chat-completion fields refused at any other value, with the reason.
CHAT_REFUSED: dict[str, str] = {
    "response_format": "structured output (json_object, json_schema) needs constrained decoding, which the "
                       "training gateway does not do",
    "reasoning_effort": "the policy's chat template decides how it reasons; leave it out",
    "verbosity": "the policy decides its answer's length; leave it out",
    "modalities": "the policy answers text only",
    "functions": "the legacy function-calling fields: send tools", "function_call": "send tool_choice",
    "frequency_penalty": _SAMPLING, "presence_penalty": _SAMPLING, "repetition_penalty": _SAMPLING,
    "min_p": _SAMPLING, "min_tokens": _SAMPLING, "logit_bias": _SAMPLING,
}


def refuse_chat_extra(body: RequestBody) -> None:
    """A 400 naming the first extra field of a chat body that is neither null nor a no-op (:data:`CHAT_NO_OPS`)."""
    for key, value in (body.model_extra or {}).items():
        allowed = CHAT_NO_OPS.get(key)
        if value is None or (allowed is not None and (not allowed or any(same_value(value, ok) for ok in allowed))):
            continue
        only = f" (accepted only as {', '.join(repr(v) for v in allowed)} or null)" if allowed else ""
        raise bad(key[:100], CHAT_REFUSED.get(key, "not supported by the training gateway") + only, "unsupported")


def check_common(body: RequestBody, streams: bool = False) -> None:
    """What neither endpoint accepts while training (the reason is in the message); ``streams``: stream is served."""
    if isinstance(body, ChatBody):
        refuse_chat_extra(body)
    else:
        reject_unsupported(body)
    if body.stream and not streams:
        raise bad("stream", "streaming is not supported by the training gateway; send stream=false", "unsupported")
    if body.n not in (None, 1):
        raise bad("n", f"one completion per call while training (n=1), got {body.n}", "unsupported")
    if body.seed is not None:
        raise bad("seed", "each call of an episode is seeded from the episode's seed (trainer.seed); leave it out",
                  "unsupported")
    if body.top_k not in (None, -1, 0):
        raise bad("top_k", "the trainer's sampling.top_k applies to every call; leave it out", "unsupported")


def requested_max_tokens(body: RequestBody) -> Optional[int]:
    """``max_completion_tokens`` or ``max_tokens`` when the program sent one (None: the gateway's default)."""
    value, name = getattr(body, "max_completion_tokens", None), "max_completion_tokens"
    if value is None and "max_tokens" in body.model_fields_set:
        value, name = body.max_tokens, "max_tokens"
    if value is not None and value < 1:
        raise bad(name, f"must be >= 1, got {value}")
    return value


def sampling_overrides(body: RequestBody) -> dict[str, float]:
    """temperature / top_p the program set explicitly (else the trainer's sampling applies)."""
    out = {}
    for name in ("temperature", "top_p"):
        value = getattr(body, name)
        if name in body.model_fields_set and value is not None:
            out[name] = _sampling_value(name, float(value))
    return out


def _sampling_value(name: str, value: float) -> float:
    """A 400 naming the field, as ``memrl serve`` answers: NaN or inf would otherwise reach the engine and fail
    the call with a 503, which discards the whole episode."""
    if name == "temperature" and not (math.isfinite(value) and value >= 0):
        raise bad(name, f"must be a finite number >= 0, got {value}")
    if name == "temperature" and value < GREEDY_BELOW:  # as memrl serve and vLLM: 1e-300 would overflow the logits
        return 0.0
    if name == "top_p" and not (math.isfinite(value) and 0 < value <= 1):
        raise bad(name, f"must be a finite number in (0, 1], got {value}")
    return value


def check_tools(body: GatewayChatBody) -> Optional[list[dict[str, Any]]]:
    """The tools to render (None: no tools). ``tool_choice: "none"`` keeps them in the prompt, as vLLM's chat
    endpoint does by default (unless ``--exclude-tools-when-tool-choice-none``); the answer is not parsed."""
    choice = body.tool_choice
    if choice is not None and choice not in ("auto", "none"):
        shown = choice if isinstance(choice, str) else "a named function"
        raise bad("tool_choice", f"{str(shown)[:40]!r} needs constrained decoding, which the training gateway does "
                  "not do; send 'auto' or 'none'", "unsupported")
    tools = body.tools or []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"tools[{i}]", 'must be {"type": "function", "function": {"name": ..., "parameters": {...}}}')
    return [_as_vllm_renders(t["function"]) for t in tools] if tools else None


def _as_vllm_renders(fn: dict[str, Any]) -> dict[str, Any]:
    """A function tool as vLLM hands it to the chat template (its pydantic dump): name, description and
    parameters always, in that order (null when not sent), ``strict`` only when sent, other keys dropped;
    the same prompt ids as a vLLM server for any spelling of the tool."""
    out = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
    if fn.get("strict") is not None:
        out["strict"] = fn["strict"]
    return {"type": "function", "function": out}
