"""The engine protocol: token ids in, token ids + sampling log-probs out.

Workflows talk to every backend (in-process transformers, an OpenAI-compatible
server, vLLM) through this one async interface. Prompts are token ids, never
text, so a memory produced in one conversation enters the next one exactly as
sampled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion.

    ``temperature == 0`` or ``greedy=True`` means argmax decoding. ``top_k <= 0``
    and ``top_p >= 1`` disable those filters. A generated stop token is kept in
    the output (the policy must learn to emit it) and ends the completion.
    ``top_logprobs > 0`` asks for the most likely tokens at each step with their
    log-probs, in ``GenerationResult.meta["top_logprobs"]`` (engines with
    ``returns_top_logprobs = True``; ``memrl serve`` refuses the request elsewhere).
    ``stop`` strings let an engine that can read text end a completion at the token
    whose text (decoded with ``skip_special_tokens``) first contains one, as vLLM does;
    that token is kept and trimming the text is the caller's (``memrl serve``, the
    gateway). An engine without a tokenizer runs on to its budget: the same answer
    after trimming, only later.
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    greedy: bool = False
    top_logprobs: int = 0
    stop: tuple[str, ...] = ()
    skip_special_tokens: bool = True  # how the text that ``stop`` is looked for in is decoded

    def __post_init__(self) -> None:
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not self.temperature >= 0 or self.temperature == float("inf"):  # NaN fails every comparison
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature == 0

    def with_(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)


@dataclass
class GenerationResult:
    """One completion: generated ids, their log-probs, and why generation ended."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} tokens but {len(self.logprobs)} logprobs")


@runtime_checkable
class Engine(Protocol):
    """Anything that can complete token-id prompts concurrently."""

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult: ...

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None: ...

    async def close(self) -> None: ...


class EngineError(RuntimeError):
    """A backend failed in a way retries did not fix."""


class EngineDeadError(EngineError):
    """The engine itself is gone (its process died or it was shut down): retrying is pointless.

    Workflows let it propagate; ``memrl train`` and ``memrl eval`` stop with a non-zero exit
    instead of recording every later episode as failed.
    """


# Who the requests started in this context belong to (a ``contextvars`` value tasks copy when created):
# ``memrl serve`` sets one per HTTP request, and an engine that batches (the HF engine) lets owners take turns,
# so one request of 256 sequences does not take every batch while another client's single prompt waits.
REQUEST_OWNER: ContextVar[object] = ContextVar("memrl_request_owner", default=None)
