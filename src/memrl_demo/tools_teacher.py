"""A scripted, sloppy teacher for the tools demo's warm start.

It plays each ticket's gold calls one turn at a time, then writes a short
closing reply, through memrl's real ``tool_agent`` workflow (so the warm start
trains on exactly the tokens and tool results an episode has). On four of the
six kinds of ticket it slips with probability ``slip_p`` in a way τ²-bench
grades 0, each a mistake real small agents make:

- ``renew``: calls return_book instead of renew_loan (wrong tool);
- ``title``: stops after finding the book, before lending it (drops a step);
- ``email``: stops after looking the member up, before the return (drops a step);
- ``pay``: takes the payment but does not say the amount (drops the required information).

With ``slip_p`` above one half a model that imitates the teacher makes the
mistake more often than not, so greedy decoding fails those kinds; sampling still
finds the right behaviour often enough for GRPO to reinforce it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from memrl_demo.tools_tasks import TaskPlan
from memrl.engines.base import GenerationResult, SamplingParams
from memrl.envs.messages import ToolCall
from memrl.text.tool_calls import render_call

SLIPS = ("renew", "title", "email", "pay")
CLOSING = {"return": "The return is recorded.", "renew": "The loan is renewed.",
           "checkout": "The book is checked out.", "title": "The book is checked out.",
           "email": "The return is recorded.", "pay": "You paid {amount}. Your fines are cleared."}
SLIP_REPLY = {"title": "I found the book in the catalogue.", "email": "I found your loan.",
              "pay": "Your fines are cleared."}


def script(plan: TaskPlan, slip: bool) -> list[str]:
    """The teacher's turns for one ticket: tool-call blocks, then the closing reply."""
    calls = [render_call(ToolCall(name, dict(args))) for name, args in plan.calls]
    closing = CLOSING[plan.kind].format(amount=plan.say[0] if plan.say else "")
    if not slip:
        return calls + [closing]
    if plan.kind == "renew":
        return [calls[0].replace('"renew_loan"', '"return_book"'), "The return is recorded."]
    if plan.kind in ("title", "email"):
        return calls[:-1] + [SLIP_REPLY[plan.kind]]
    if plan.kind == "pay":
        return calls + [SLIP_REPLY["pay"]]
    raise ValueError(f"the teacher has no slip for kind {plan.kind!r}")


class ToolTeacherEngine:
    """An engine that answers each generate call with the next turn of its script (ignores the prompt)."""

    def __init__(self, tokenizer: Any, plan: TaskPlan, slip_p: float, rng: random.Random) -> None:
        slip = plan.kind in SLIPS and rng.random() < slip_p
        self.turns = [tokenizer.encode(t, add_special_tokens=False) for t in script(plan, slip)]
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.slipped = slip

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> GenerationResult:
        ids = (self.turns.pop(0) if self.turns else []) + [self.eos]
        return GenerationResult(ids, [0.0] * len(ids), "stop")

    async def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        return None

    async def close(self) -> None:
        return None
