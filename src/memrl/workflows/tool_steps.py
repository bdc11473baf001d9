"""τ²-bench's limits on a simulation: steps, tool errors and wall-clock time (``workflow.options.max_steps``
/ ``max_errors`` / ``timeout_s``).

τ²-bench's orchestrator counts a step for every message the agent or the user sends and for every
batch of tool results. After each step that does not hand tool calls to the environment it ends the
simulation once the tool results that were errors (the agent's and the user's together) reach
``max_errors`` (``too_many_errors``) or the steps reach ``max_steps`` (``max_steps``); a limit ends it
even when that same step stopped it too (the limit's reason is the one recorded), and either scores 0.
At the same points it ends a simulation that has run ``timeout`` seconds since it started
(``timeout``, also 0), but only one that nothing else ended: a stop on that step, or a step or error
limit, is recorded instead. The clock is read between steps, so a slow model call is not cut short.
What the initial state holds is not a step: the agent's greeting, a task's message history, the solo
agent's first message. memrl counts the same way, so an episode ends where τ²-bench's would and is
graded as it would be. ``None`` switches a limit off (memrl's default; ``max_turns`` and
``max_total_tokens`` bound an episode either way). τ²-bench's defaults are 200 steps, 10 errors and no
timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from memrl.envs.messages import InvalidMessageError, Message

CLOCK: Callable[[], float] = time.perf_counter  # the timeout's clock, as τ²-bench's (tests replace it)


@dataclass
class StepLimits:
    """Steps and tool errors so far and the time since the episode started, against the limits (``None``:
    no limit). ``clock``: a monotonic clock in seconds, :data:`CLOCK` unless given."""

    max_steps: int | None = None
    max_errors: int | None = None
    timeout_s: float | None = None
    steps: int = 0
    errors: int = 0
    clock: Callable[[], float] | None = None
    started: float | None = None

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.now()

    def now(self) -> float:
        return (self.clock or CLOCK)()

    @property
    def active(self) -> bool:
        return self.max_steps is not None or self.max_errors is not None or self.timeout_s is not None

    def would_stop(self, msgs: list[Message]) -> bool:
        """Whether a user's turn that went as far as ``msgs`` has reached a limit (nothing is counted)."""
        return replace(self).user_turn(msgs)[1] is not None

    def step(self, results: Sequence[Message] = (), unreadable: int = 0) -> None:
        """One step: a message, or a batch of tool ``results`` (each result that is an error counts, as do
        ``unreadable`` calls the agent wrote, which memrl answers with an error instead of running)."""
        self.steps += 1
        self.errors += sum(bool(m.error) for m in results) + unreadable

    def reached(self, *, stopped: bool = False, timed: bool = True) -> str | None:
        """The limit reached, if any, checked in τ²-bench's order (errors last, so they win over steps). The
        timeout applies only when the step did not stop the episode (``stopped``) and ``timed`` (False: the
        clock was already read live at this point, see :meth:`user_turn`)."""
        if self.max_errors is not None and self.errors >= self.max_errors:
            return "too_many_errors"
        if self.max_steps is not None and self.steps >= self.max_steps:
            return "max_steps"
        if not timed or stopped or self.timeout_s is None:  # the clock is read only where it can decide
            return None
        return "timeout" if self.now() - (self.started or 0.0) >= self.timeout_s else None

    def user_turn(self, msgs: list[Message], *, stops: bool = False) -> tuple[list[Message], str | None]:
        """A user's turn (its messages, each tool-calling one followed by its results) counted step by step:
        the part of it τ²-bench would have let happen, and the limit that cut it (``None``: all of it).
        The check skipped after a message that calls tools falls, as in τ²-bench, after its results.
        ``stops``: the turn's last message ends the conversation. The clock is read at the turn's end only:
        a simulator that acts in rounds asked :meth:`would_stop` after each one as it went, and went on."""
        i = 0
        while i < len(msgs):
            self.step()
            j = i + 1
            if msgs[i].tool_calls:
                while j < len(msgs) and msgs[j].role == "tool":
                    j += 1
                self.step(msgs[i + 1:j])
            i = j
            last = i >= len(msgs)
            hit = self.reached(stopped=last and stops, timed=last)
            if hit is not None:
                return msgs[:i], hit
        return msgs, None


def breaks_protocol(content: str | None, calls: bool) -> bool:
    """τ²-bench's communication rule (``--enforce-communication-protocol``, memrl's
    ``workflow.options.enforce_protocol``): a message carries text or tool calls, never both and never
    neither. Its orchestrator checks every agent and user message and ends a run that breaks it as
    ``agent_error`` / ``user_error`` (a step or error limit reached on that step is recorded instead)."""
    return calls == bool((content or "").strip())


def first_protocol_break(msgs: Sequence[Message]) -> int | None:
    """The index of the first user message in ``msgs`` that breaks the rule, if any."""
    return next((i for i, m in enumerate(msgs) if m.role == "user" and breaks_protocol(m.content, bool(m.tool_calls))),
                None)


def check_agent_message(content: str, calls: bool, errors: Sequence[str], solo_text: bool) -> None:
    """Raise :class:`InvalidMessageError` where τ²-bench's agent or orchestrator raises on the agent's message
    (``errors``: tool calls the server returned that could not be read; ``solo_text``: a solo agent wrote text)."""
    if errors:
        raise InvalidMessageError(f"the agent's tool call could not be read (tau2-bench raises): {errors[0]}")
    if not calls and not content.strip():
        raise InvalidMessageError("the agent sent an empty message (tau2-bench raises)")
    if solo_text:
        raise InvalidMessageError("the solo agent wrote text instead of calling a tool (tau2-bench raises)")


def check_user_messages(msgs: Sequence[Message]) -> None:
    """Raise :class:`InvalidMessageError` on an empty user message, as τ²-bench's orchestrator does."""
    if any(m.role == "user" and not m.tool_calls and not (m.content or "").strip() for m in msgs):
        raise InvalidMessageError("the user sent an empty message (tau2-bench raises)")
