"""What an episode spent on chat requests, per role (agent, user, judge): requests and tokens.

An evaluation against a paid API (gpt-4.1 as agent, user simulator and judge, as τ²-bench runs) should
say what it cost in tokens. The user simulator and the judge are built once and shared by every
episode running at the same time, so their replies cannot be counted on the objects themselves: an
episode opens a meter (:func:`metering`), and every chat reply received while it runs, in its asyncio
task or a task started from it, is added to that episode's meter (:func:`count`). A reply outside any
meter is not counted. Tokens are what the server's ``usage`` says; a reply without ``usage`` counts as
a request with unreported tokens. :func:`usage_cost` prices them as τ²-bench prices its runs (LiteLLM's
price table), when LiteLLM is installed and knows the model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields
from typing import Any

ROLES = ("agent", "user", "judge")


@dataclass
class ChatUsage:
    """Totals of one role's chat requests (``cached_tokens``: the part of ``prompt_tokens`` the server
    served from its prompt cache, when it says so)."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    unreported: int = 0  # replies that came without usage

    def add(self, reply: Any) -> None:
        self.requests += 1
        if reply.prompt_tokens is None and reply.completion_tokens is None:
            self.unreported += 1
        self.prompt_tokens += reply.prompt_tokens or 0
        self.cached_tokens += getattr(reply, "cached_tokens", None) or 0
        self.completion_tokens += reply.completion_tokens or 0


_METER: ContextVar[dict[str, ChatUsage] | None] = ContextVar("memrl_chat_usage", default=None)


@contextmanager
def metering() -> Iterator[dict[str, ChatUsage]]:
    """Count every chat reply received inside this block (in this task and tasks it starts), per role."""
    meter: dict[str, ChatUsage] = {}
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def count(role: str, reply: Any) -> None:
    """Add ``reply`` (a :class:`memrl.engines.openai_chat.ChatReply`) to the open meter under ``role``."""
    meter = _METER.get()
    if meter is not None:
        meter.setdefault(role, ChatUsage()).add(reply)


def usage_metrics(meter: Mapping[str, ChatUsage]) -> dict[str, float]:
    """An episode's meter as flat metrics: ``<role>_requests``, ``<role>_prompt_tokens``, ... (empty
    when no chat request was made, as in token-protocol episodes)."""
    return {f"{role}_{name}": float(value) for role, usage in meter.items() for name, value in asdict(usage).items()}


def usage_totals(metrics: list[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per-role totals over episodes' metrics (what :func:`usage_metrics` wrote), roles in a fixed order."""
    names = [f.name for f in fields(ChatUsage)]
    roles = [r for r in ROLES if any(f"{r}_requests" in m for m in metrics)]
    return {role: {n: int(sum(float(m.get(f"{role}_{n}", 0) or 0) for m in metrics)) for n in names}
            for role in roles}


def usage_line(totals: Mapping[str, Mapping[str, int]]) -> str:
    """One line for people: ``agent 120 requests, 1.2M prompt (300k cached) + 34k completion tokens; ...``."""
    parts = []
    for role, u in totals.items():
        cached = f" ({_short(u['cached_tokens'])} cached)" if u.get("cached_tokens") else ""
        unreported = f", {u['unreported']} without usage" if u.get("unreported") else ""
        parts.append(f"{role} {u['requests']} requests, {_short(u['prompt_tokens'])} prompt{cached} + "
                     f"{_short(u['completion_tokens'])} completion tokens{unreported}")
    return "; ".join(parts)


def _short(n: int) -> str:
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:.1f}{unit}".replace(".0" + unit, unit)
    return str(n)


def role_models(cfg: Any) -> dict[str, str | None]:
    """The model name each role's chat requests carry in a run of ``cfg`` (what LiteLLM prices)."""
    e = cfg.env
    return {"agent": cfg.engine.served_model or cfg.model.path, "user": e.user.served_model or e.user.model,
            "judge": e.judge.served_model or e.judge.model}


def usage_cost(model: str | None, usage: Mapping[str, int] | None) -> float | None:
    """US dollars for ``usage`` at LiteLLM's price for ``model``, as τ²-bench costs its runs (LiteLLM's
    ``completion_cost``: cached prompt tokens at the cache price). The price table is the one LiteLLM
    ships (``LITELLM_LOCAL_MODEL_COST_MAP``: nothing is fetched). None without LiteLLM, or for a model
    name it has no price for under exactly that name (a local or self-served model)."""
    if not model or not usage:
        return None
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError:
        return None
    if model not in litellm.model_cost:
        return None
    try:
        prompt, completion = litellm.cost_per_token(
            model=model, prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            cache_read_input_tokens=int(usage.get("cached_tokens", 0)))
    except Exception:  # a price entry LiteLLM cannot apply: no cost rather than a wrong one
        return None
    return float(prompt) + float(completion)
