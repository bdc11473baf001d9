"""The NL-assertion judge: τ²'s contract (prompt parts, JSON verdicts) on a scripted engine."""

from __future__ import annotations

import asyncio
import json

import pytest

from memrl.envs.domain import load_domain
from memrl.envs.evaluate import evaluate_async
from memrl.envs.messages import Message
from memrl.envs.nl_judge import LLMNLJudge, build_nl_judge, judge_chat, parse_verdicts, render_conversation
from memrl.envs.tasks import Task
from memrl.models.tiny import build_hf_tokenizer
from memrl.testing.scripted import ScriptedEngine
from memrl.workflows.common import decode, encode_text

ASSERTS = ["The agent greeted the user", "The agent refunded the order"]


@pytest.fixture(scope="module")
def tok():
    return build_hf_tokenizer(['{"results": [{"expectedOutcome": "x", "reasoning": "y", "metExpectation": true}]}'],
                              vocab_size=400)


def verdict(*met: bool) -> str:
    return json.dumps({"results": [{"expectedOutcome": a, "reasoning": "seen", "metExpectation": m}
                                   for a, m in zip(ASSERTS, met)]})


def judge(tok, answer: str) -> tuple[LLMNLJudge, ScriptedEngine]:
    engine = ScriptedEngine(lambda prompt, params: encode_text(tok, answer) + [tok.convert_tokens_to_ids("<|im_end|>")])
    return LLMNLJudge(engine, tok), engine


def nl_task() -> Task:
    return Task.model_validate({"id": "t", "ticket": "x", "evaluation_criteria": {
        "actions": [], "nl_assertions": ASSERTS, "reward_basis": ["DB", "NL_ASSERTION"]}})


LOG = [Message("user", "hello"), Message("assistant", "Hi! How can I help?")]


def test_the_prompt_has_the_conversation_and_the_outcome_list():
    chat = judge_chat(ASSERTS, LOG)
    assert chat[0]["role"] == "system" and "metExpectation" in chat[0]["content"]
    assert render_conversation(LOG) == "user: hello\nassistant: Hi! How can I help?"
    assert "conversation:\nuser: hello" in chat[1]["content"]
    assert chat[1]["content"].endswith("expectedOutcomes:\n" + str(ASSERTS))


def test_verdicts_are_read_strictly():
    assert [c.met for c in parse_verdicts(verdict(True, False), ASSERTS)] == [True, False]
    fenced = "Here you go:\n```json\n" + verdict(True, True) + "\n```"
    assert [c.met for c in parse_verdicts(fenced, ASSERTS)] == [True, True]
    short = parse_verdicts(verdict(True), ASSERTS)  # one outcome not graded: unmet (τ² would pass it)
    assert [c.met for c in short] == [True, False] and short[1].justification == "not graded by the judge"
    assert [c.met for c in parse_verdicts("I think so.", ASSERTS)] == [False, False]
    as_text = '{"results": [{"metExpectation": "true"}, {"metExpectation": "no"}]}'
    assert [c.met for c in parse_verdicts(as_text, ASSERTS)] == [True, False]


@pytest.mark.parametrize("value, met", [(1, True), (1.0, True), ('"1"', True), ('"yes"', True), ('"TRUE"', True),
                                        (0, False), ('"no"', False), ('" true "', False), (2, False),
                                        ("null", False)])
def test_a_verdict_value_is_read_as_tau2_benchs_model_reads_it(value, met):
    """τ²-bench builds its NLAssertionCheck (met: bool) from the value: pydantic's lax bool."""
    text = '{"results": [{"metExpectation": %s}]}' % value
    assert [c.met for c in parse_verdicts(text, ASSERTS[:1])] == [met]


def test_an_extra_unmet_entry_fails_as_in_tau2_bench():
    entries = [{"expectedOutcome": a, "reasoning": "seen", "metExpectation": m}
               for a, m in zip([*ASSERTS, "made up"], (True, True, False))]
    checks = parse_verdicts(json.dumps({"results": entries}), ASSERTS)  # three entries for two assertions
    assert [c.met for c in checks] == [True, True, False]


def test_judged_assertions_enter_the_reward(tok):
    lib = load_domain("library")
    ok, engine = judge(tok, verdict(True, True))
    info = asyncio.run(evaluate_async(lib, nl_task(), LOG, nl_judge=ok))
    assert info.reward == 1.0 and info.nl_checks == [True, True] and info.nl_unchecked == 0
    prompt = decode(tok, engine.calls[0][0])
    assert "expectedOutcomes:" in prompt and "assistant: Hi! How can I help?" in prompt
    assert engine.calls[0][1].temperature == 0.0
    bad, _ = judge(tok, verdict(True, False))
    info = asyncio.run(evaluate_async(lib, nl_task(), LOG, nl_judge=bad))
    assert info.reward == 0.0 and info.breakdown["NL_ASSERTION"] == 0.0 and info.nl_justifications == ["seen"] * 2
    # not judged where it cannot count: an early ending, or no judge (then said in the note)
    unused, engine = judge(tok, verdict(False, False))
    assert asyncio.run(evaluate_async(lib, nl_task(), LOG, ending="max_turns", nl_judge=unused)).reward == 0.0
    assert engine.calls == []
    info = asyncio.run(evaluate_async(lib, nl_task(), LOG))
    assert info.reward == 1.0 and info.nl_unchecked == 2 and "not judged" in info.note


def test_no_judge_without_a_model():
    from memrl.config.schema import MemRLConfig

    assert build_nl_judge(MemRLConfig.model_validate({})) is None
    with pytest.raises(ValueError, match="env.judge.base_url"):
        build_nl_judge(MemRLConfig.model_validate({"env": {"nl_judge_model": "tiny32", "nl_judge_engine": "openai"}}))


@pytest.mark.parametrize("text", ["1" * 5000, "[" * 100_000, '{"results": ' + "[" * 100_000 + "}"])
def test_unreadable_judge_answers_are_unmet_not_errors(text):
    """A number past Python's int-string limit (ValueError) or nesting past the stack (RecursionError): unmet."""
    checks = parse_verdicts(text, ["the agent apologised"])
    assert [c.met for c in checks] == [False]
