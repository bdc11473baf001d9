"""workflow.answer_format and workflow.reward=memagent_strict inside real workflows, and trainer.eval_n."""

import asyncio

import pytest

from memrl.config import MemRLConfig, WorkflowConfig
from memrl.data import LongContextSample
from memrl.testing import ScriptedEngine
from memrl.train.rollout import evaluate_samples
from memrl.types import Trajectory
from memrl.workflows.common import encode_text
from memrl.workflows.full_context import full_context
from memrl.workflows.memagent import memagent


def _sample(answers=("New York",)):
    return LongContextSample(index=3, question="Which city?", answers=list(answers), context="some text", num_docs=1)


def _run(workflow, tok, final_text, **cfg):
    eng = ScriptedEngine(lambda prompt, params: encode_text(tok, final_text) + [tok.eos_token_id])
    return asyncio.run(workflow(_sample(), eng, tok, WorkflowConfig(chunk_tokens=50, **cfg)))


@pytest.mark.parametrize("workflow", [memagent, full_context])
def test_answer_format_decides_what_is_scored(tiny_model, workflow):
    _, tok = tiny_model
    text = "Therefore, the answer is New York. \\boxed{Boston}"
    boxed = _run(workflow, tok, text, reward="em")
    assert (boxed.info["answer"], boxed.reward) == ("Boston", 0.0)
    answer_is = _run(workflow, tok, "Therefore, the answer is New York.", reward="em", answer_format="answer_is")
    assert (answer_is.info["answer"], answer_is.reward) == ("New York", 1.0)
    regex = _run(workflow, tok, "FINAL: New York", reward="em", answer_format="regex:FINAL: (.+)")
    assert (regex.info["answer"], regex.reward) == ("New York", 1.0)


def test_memagent_strict_is_the_reward_and_stricter_than_sub_em(tiny_model):
    _, tok = tiny_model
    loose = _run(memagent, tok, "so \\boxed{New York City}", reward="memagent_strict")
    assert loose.metrics["sub_em"] == 1.0 and loose.reward == 0.0  # containment is not a strict match
    exact = _run(memagent, tok, "so \\boxed{new  york}", reward="memagent_strict")
    assert exact.reward == 1.0  # lowercased, spaces removed on both sides


def test_trainer_eval_n_averages_n_sampled_episodes():
    seen = []

    async def wf(sample, engine, tok, wcfg, *, sampling, **ids):
        seen.append(sampling)
        reward = 1.0 if len(seen) % 4 == 1 else 0.0  # one right answer in every four
        return Trajectory([], reward, str(sample.index), str(sample.index))

    cfg = MemRLConfig.model_validate({"trainer": {"eval_n": 4, "eval_temperature": 1.0, "eval_top_p": 0.7}})
    samples = [_sample(), _sample()]
    assert asyncio.run(evaluate_samples(cfg, wf, samples, None, None)) == {"eval/accuracy": 25.0}  # 2 of 8
    assert len(seen) == 8 and all((p.temperature, p.top_p, p.is_greedy) == (1.0, 0.7, False) for p in seen)
    assert len({p.seed for p in seen}) == 8  # each (sample, repeat) its own seed

    seen.clear()
    asyncio.run(evaluate_samples(MemRLConfig(), wf, samples, None, None))  # default: one greedy episode each
    assert len(seen) == 2 and all(p.is_greedy for p in seen)


def by_key(text: str, *, sample, **kw) -> float:
    """A reward written for dict records (docs/guides/custom-reward.md), given a long-context sample."""
    return float(any(g in text for g in sample["answers"]) and sample.get("missing", 1) == 1)


def test_a_reward_written_for_dict_records_reads_a_long_context_sample():
    from memrl.plugins import reward_value

    sample = LongContextSample(index=3, question="Where?", answers=["Paris"], context="Document 1:\nParis",
                               num_docs=1, extra={"data_source": "hotpotqa"})
    assert sample["input"] == sample["question"] == "Where?" and sample["data_source"] == "hotpotqa"
    assert sample["index"] == 3 and sample.get("nothing") is None
    with pytest.raises(KeyError):
        sample["nothing"]
    name = f"{__name__}:by_key"
    assert reward_value(name, "It is Paris.", ["Paris"], "Paris", sample=sample) == 1.0
    assert reward_value(name, "It is Rome.", ["Paris"], "Rome", sample=sample) == 0.0
