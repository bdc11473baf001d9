"""The HF engine passes its KV cache under the name the installed transformers expects: no
``FutureWarning: past_key_values is deprecated`` on every generation (transformers 5.x calls it ``cache``)."""

from __future__ import annotations

import asyncio
import inspect
import warnings

from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine, cache_keyword


def test_generation_warns_nothing_about_the_cache_argument(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(model)
    prompt = tok.encode("hello world", add_special_tokens=False)

    async def go():
        try:
            return await eng.generate(prompt, SamplingParams(greedy=True, max_new_tokens=4))
        finally:
            await eng.close()

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the deprecation warning would fail the generation
        out = asyncio.run(go())
    assert len(out.token_ids) == 4


def test_cache_keyword_follows_the_model_signature(tiny_model):
    model, _ = tiny_model
    params = inspect.signature(model.forward).parameters
    assert cache_keyword(model) == ("cache" if "cache" in params else "past_key_values")
    assert cache_keyword(model) in params
