"""The HF engine ends a completion at the token whose text completes a stop string, as vLLM does: what it
keeps is exactly the start of the completion it would have sampled without the stop, up to that token."""

from __future__ import annotations

import asyncio

import pytest

from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine

SAMPLED = SamplingParams(max_new_tokens=40, temperature=1.0, seed=11)


def generate(engine, prompt, params):
    async def go():
        try:
            return await asyncio.gather(*[engine.generate(p, params) for p in prompt])
        finally:
            await engine.close()

    return asyncio.run(go())


def first_prefix_with(tok, ids, stop):
    """The length of the shortest prefix of ``ids`` whose text contains ``stop`` (how serve cuts afterwards)."""
    return next(k for k in range(1, len(ids) + 1) if stop in tok.decode(ids[:k], skip_special_tokens=True))


@pytest.fixture
def reference(tiny_model):
    """Two prompts' seeded completions without a stop string, and a stop string each holds mid-way."""
    model, tok = tiny_model
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("hello world", "the key is 42 and")]
    full = generate(HFEngine(model, tokenizer=tok), prompts, SAMPLED)
    stops = []
    for res in full:
        text = tok.decode(res.token_ids[12:15], skip_special_tokens=True).strip()
        assert text, "the tiny model's tokens 12-15 decode to text"
        stops.append(text)
    return prompts, full, stops


def test_a_stop_string_ends_the_completion_where_serve_would_cut_it(tiny_model, reference):
    model, tok = tiny_model
    prompts, full, stops = reference
    for prompt, ref, stop in zip(prompts, full, stops):
        engine = HFEngine(model, tokenizer=tok)
        (res,) = generate(engine, [prompt], SAMPLED.with_(stop=(stop, "never-said-\u2603")))
        k = first_prefix_with(tok, ref.token_ids, stop)
        assert k < len(ref.token_ids) and res.finish_reason == "stop"
        assert res.token_ids == ref.token_ids[:k] and res.logprobs == pytest.approx(ref.logprobs[:k], abs=1e-5)
        assert engine.stats.generated_tokens == k  # it stopped decoding, not only trimmed


def test_without_a_tokenizer_stop_strings_leave_the_completion_whole(tiny_model, reference):
    model, tok = tiny_model
    prompts, full, stops = reference
    (res,) = generate(HFEngine(model), prompts[:1], SAMPLED.with_(stop=(stops[0],)))
    assert res.token_ids == full[0].token_ids and res.finish_reason == "length"


def test_rows_with_and_without_stops_share_a_batch(tiny_model, reference):
    """Each row reads its own stop strings; a row without any runs on beside one that stopped."""
    model, tok = tiny_model
    prompts, full, stops = reference
    engine = HFEngine(model, tokenizer=tok)

    async def go():
        try:
            return await asyncio.gather(engine.generate(prompts[0], SAMPLED.with_(stop=(stops[0],))),
                                        engine.generate(prompts[1], SAMPLED))
        finally:
            await engine.close()

    stopped, whole = asyncio.run(go())
    assert max(engine.stats.batch_sizes) == 2
    assert stopped.token_ids == full[0].token_ids[:first_prefix_with(tok, full[0].token_ids, stops[0])]
    assert whole.token_ids == full[1].token_ids and whole.finish_reason == "length"
