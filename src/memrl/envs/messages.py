"""The message log of a tool-agent episode (what the evaluator grades)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class ToolCall:
    """A tool call by the agent (``requestor='assistant'``) or the user (dual control)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""
    requestor: Literal["assistant", "user"] = "assistant"


# What a user simulator's turn ends with when its tool-call rounds run out (``act(max_rounds=...)``): not words
# of the user's. τ²-bench's simulator has no round cap and would run on to the orchestrator's step limit (a
# MAX_STEPS run, reward 0); the tool agent ends such an episode ungraded, as that limit would.
USER_GAVE_UP = "###USER_GAVE_UP###"


@dataclass
class Message:
    """One turn: text and/or tool calls (assistant, user) or a tool result (tool)."""

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    error: bool = False  # tool role: the call failed
    call_id: str = ""
    requestor: Literal["assistant", "user"] = "assistant"  # tool role: who made the call (τ² ToolMessage)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        calls = [c if isinstance(c, ToolCall) else ToolCall(name=c["name"], arguments=c.get("arguments") or {},
                                                          id=c.get("id", ""),
                                                          requestor=c.get("requestor", "assistant"))
                 for c in d.get("tool_calls") or []]
        return cls(role=d["role"], content=d.get("content"), tool_calls=calls, error=bool(d.get("error", False)),
                   call_id=d.get("call_id") or d.get("id") or "", requestor=d.get("requestor") or "assistant")


class InvalidMessageError(ValueError):
    """A message τ²-bench refuses by raising (``workflow.options.invalid_messages=tau2``): an empty one, a tool
    call whose arguments are not a JSON object, a solo agent's text. Its run then fails as a whole and its batch
    runner tries it again, then records it as ``infrastructure_error``, outside the metrics; ``memrl eval`` does
    the same (``eval.max_retries``)."""



def rounds(cap: int | None) -> Iterator[int]:
    """Round numbers of a user's tool turn: ``cap`` of them, or without end (``None``: a limit ends the turn)."""
    return itertools.count() if cap is None else iter(range(cap))
