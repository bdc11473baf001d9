"""One definition of an engine log-prob: vLLM returns the trainer's temperature-scaled log-probs.

vLLM's default ``raw_logprobs`` reports log-probs before temperature; memrl starts its engine
with ``processed_logprobs``. At temperature 0.6 the sampled tokens' log-probs must equal what the
trainer recomputes (``logits / T``, unfiltered) to float32 rounding with top-p off, and with top-p
on they are the renormalised ones (never below the trainer's), as the start-up notice says.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

import torch  # noqa: E402

from memrl.config import load_config  # noqa: E402
from memrl.engines.base import SamplingParams  # noqa: E402
from memrl.engines.vllm import VLLMEngine  # noqa: E402
from memrl.engines.vllm_args import filtering_notice  # noqa: E402
from memrl.models.resolve import load_model, resolve_model_path  # noqa: E402
from tests.vllm.conftest import VLLM_OVERRIDES  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(20, 60))]


@pytest.fixture(scope="module")
def engine():
    eng = VLLMEngine.from_config(load_config(None, VLLM_OVERRIDES))
    yield eng
    eng.shutdown()


def _trainer_logprobs(prompt: list[int], out: list[int], temperature: float) -> torch.Tensor:
    """The trainer's log-prob of each generated token: log_softmax(logits / T), float32, unfiltered."""
    model = load_model(resolve_model_path("tiny32"), "float32", "cpu")
    ids = torch.tensor([prompt + out])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(out).unsqueeze(-1)).squeeze(-1)


def _sample(engine, temperature: float, top_p: float):
    sp = SamplingParams(max_new_tokens=16, temperature=temperature, top_p=top_p, seed=7)

    async def run():
        return await asyncio.gather(*(engine.generate(p, sp) for p in PROMPTS))
    return asyncio.run(run())


def test_engine_runs_in_processed_mode(engine):
    assert engine.logprobs_mode == "processed_logprobs"


@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_logprobs_are_the_trainers_at_any_temperature(engine, temperature):
    gaps, raw_gaps = [], []
    for prompt, res in zip(PROMPTS, _sample(engine, temperature, 1.0)):
        want = _trainer_logprobs(prompt, res.token_ids, temperature)
        got = torch.tensor(res.logprobs)
        gaps.append((got - want).abs().mean().item())
        raw_gaps.append((got - _trainer_logprobs(prompt, res.token_ids, 1.0)).abs().mean().item())
    assert max(gaps) < 1e-3, gaps
    if temperature != 1.0:  # the check tells the definitions apart: raw log-probs are far off here
        assert min(raw_gaps) > 1e-2, raw_gaps


def test_top_p_gives_renormalised_logprobs_and_says_so(engine):
    assert filtering_notice("processed_logprobs", 0.9, 0) is not None
    assert filtering_notice("processed_logprobs", 1.0, 0) is None
    for prompt, res in zip(PROMPTS, _sample(engine, 0.6, 0.9)):
        want = _trainer_logprobs(prompt, res.token_ids, 0.6)
        got = torch.tensor(res.logprobs)
        assert bool((got >= want - 1e-4).all())  # dividing by the kept mass (<= 1) only raises a log-prob
