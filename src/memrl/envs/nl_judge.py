"""An LLM judge for τ²-bench's NL assertions, on any memrl engine (token ids in, token ids out).

τ²-bench grades ``nl_assertions`` with an LLM whenever a task's ``reward_basis``
names NL_ASSERTION (112 of the 114 retail tasks do), so a score computed without
a judge is higher than τ²-bench's. This module follows τ²'s judging contract, in
memrl's own words: the system prompt asks for each expected outcome to be graded
on its own; the user prompt gives the conversation (one ``role: content`` line
per message) and the list of expected outcomes; the answer is a JSON object
``{"results": [{"expectedOutcome", "reasoning", "metExpectation"}, ...]}`` and
the component passes only if every outcome is met.

Where τ²-bench would pass by accident, this judge fails: an answer that is not
JSON, or that grades fewer outcomes than were asked, leaves the ungraded ones
unmet (τ²'s ``all()`` over a short list would pass them). Otherwise it reads the
answer as τ²-bench does: every entry is a check (an extra unmet one fails the
component), and ``metExpectation`` is read as pydantic reads a bool (``1``,
``"yes"`` are met; a value pydantic refuses, where τ²-bench raises, is unmet).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memrl.engines.base import Engine, SamplingParams
from memrl.engines.openai_chat import side_chat
from memrl.envs.messages import Message

JUDGE_SYSTEM = """You grade a customer-service conversation against a list of expected outcomes.

- The conversation, between an agent and a customer, was recorded while a test case ran.
- Decide for each expected outcome, separately from the others, whether the agent's behaviour in the
  conversation satisfies it.

Answer with one JSON object and nothing else, with one entry per expected outcome, in the given order:
{
    "results": [
        {
            "expectedOutcome": "<the expected outcome, repeated from the input>",
            "reasoning": "<a short justification>",
            "metExpectation": <true or false>
        }
    ]
}"""

JUDGE_USER = """conversation:
{conversation}

expectedOutcomes:
{outcomes}"""


@dataclass
class NLCheck:
    """One graded assertion (τ²'s ``NLAssertionCheck``)."""

    assertion: str
    met: bool
    justification: str = ""


def render_conversation(messages: Sequence[Message]) -> str:
    """The conversation as the judge reads it: ``role: content``, one message per line (as τ²-bench)."""
    return "\n".join(f"{m.role}: {m.content}" for m in messages)


def judge_chat(assertions: Sequence[str], messages: Sequence[Message], prompts: str = "memrl") -> list[dict[str, str]]:
    """The chat sent to the judge model: memrl's words, or (``prompts`` tau2) τ²-bench's own prompt."""
    if prompts == "tau2":
        from memrl.envs.tau2_schemas import tau2_judge_chat

        return tau2_judge_chat(render_conversation(messages), list(assertions))
    user = JUDGE_USER.format(conversation=render_conversation(messages), outcomes=list(assertions))
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def parse_verdicts(text: str, assertions: Sequence[str]) -> list[NLCheck]:
    """Verdicts from the judge's answer, one per assertion in order; anything unreadable is unmet."""
    data: Any = None
    for candidate in [text] + re.findall(r"\{.*\}", text, flags=re.DOTALL):
        try:
            data = json.loads(candidate)
            break
        except (ValueError, RecursionError):  # not JSON, a number past int limits, nesting past the stack
            continue
    results = data.get("results") if isinstance(data, dict) else None
    results = [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
    checks = []
    for i, assertion in enumerate(assertions):
        r = results[i] if i < len(results) else {}
        why = str(r.get("reasoning", "")) if r else "not graded by the judge"
        checks.append(NLCheck(assertion, _met(r.get("metExpectation")), why))
    for r in results[len(assertions):]:  # τ²-bench makes a check of every entry the judge returns
        checks.append(NLCheck(str(r.get("expectedOutcome", "(an entry beyond the assertions)")),
                              _met(r.get("metExpectation")), str(r.get("reasoning", ""))))
    return checks


def _met(value: Any) -> bool:
    """``metExpectation`` read as τ²-bench's pydantic model reads it (``true``, ``1``, ``"yes"``, ``"on"``...);
    a value it would refuse is unmet."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        return False


class LLMNLJudge:
    """Grades NL assertions with a model behind the Engine protocol (greedy by default).

    ``await judge.check(assertions, messages)`` gives the per-assertion verdicts; the grader
    (:func:`memrl.envs.evaluate.evaluate_async`) takes the judge itself.
    """

    def __init__(self, engine: Engine, tokenizer: Any, *, max_tokens: int | None = 1024, temperature: float = 0.0,
                 seed: int | None = 0, chat: bool = False, prompts: str = "memrl") -> None:
        """``chat``: send the judge's two messages to ``engine.chat`` (``env.judge.protocol=chat``) as τ²-bench
        sends them to its judge model; ``max_tokens`` None then sends no cap, as τ²-bench. ``prompts`` tau2:
        τ²-bench's own judge prompt (``env.prompts``)."""
        if chat and not callable(getattr(engine, "chat", None)):
            raise ValueError("env.judge.protocol=chat needs an engine that speaks /v1/chat/completions (an "
                             "OpenAI-compatible server, or memrl.text.template_chat.as_chat(engine, tokenizer)), "
                             f"got {type(engine).__name__}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.max_tokens = 1024 if max_tokens is None and not chat else max_tokens
        self.temperature = temperature
        self.seed = seed
        self.chat = chat
        self.prompts = prompts

    def prompt_ids(self, assertions: Sequence[str], messages: Sequence[Message]) -> list[int]:
        from memrl.text.tokens import encode_text

        chat = judge_chat(assertions, messages, self.prompts)
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        else:
            text = "".join(f"<|im_start|>{c['role']}\n{c['content']}<|im_end|>\n" for c in chat)
            text += "<|im_start|>assistant\n"
        return encode_text(self.tokenizer, text)

    async def check(self, assertions: Sequence[str], messages: Sequence[Message]) -> list[NLCheck]:
        from memrl.text.tokens import decode, stop_token_ids, strip_stop

        if not assertions:
            return []
        if self.chat:
            reply = await side_chat(self.engine, judge_chat(assertions, messages, self.prompts), [],
                                    max_tokens=self.max_tokens, temperature=self.temperature, seed=self.seed,
                                    role="judge")
            return parse_verdicts(reply.content or "", assertions)
        stops = stop_token_ids(self.tokenizer)
        params = SamplingParams(max_new_tokens=self.max_tokens, temperature=self.temperature,
                                stop_token_ids=stops, seed=self.seed)
        res = await self.engine.generate(self.prompt_ids(assertions, messages), params)
        return parse_verdicts(decode(self.tokenizer, strip_stop(res.token_ids, stops)), assertions)


def build_nl_judge(cfg: Any) -> LLMNLJudge | None:
    """The judge of ``cfg.env`` (``env.judge.model``...), or None when none is configured."""
    from memrl.engines.factory import build_side_engine

    e = cfg.env
    if not e.judge.model:
        return None
    engine, tokenizer = build_side_engine(cfg, e.judge, "env.judge")
    chat = e.judge.protocol == "chat"  # tau2-bench's judge call: temperature 0, no seed, no cap
    if chat:
        from memrl.text.template_chat import as_chat

        engine = as_chat(engine, tokenizer)
    return LLMNLJudge(engine, tokenizer, max_tokens=e.judge.reply_tokens(), chat=chat, seed=None if chat else 0,
                      prompts=e.prompts)
