"""Prefill by length where masks materialize (a CPU): prompts of different lengths, the longest past
``SPLIT_PREFILL_TOKENS``, prefill one length at a time and their caches are joined left-padded. Every row must
generate the tokens and log-probs of the one padded prefill, and of the same request decoded alone."""

from __future__ import annotations

import asyncio

import pytest
import torch

from memrl.engines import hf_batch
from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine
from tests.engines.test_hf_static import assert_same, llama

G = torch.Generator().manual_seed(0)
LONG = [torch.randint(1, 250, (n,), generator=G).tolist() for n in (700, 530, 600)]
PROMPTS = [LONG[0], LONG[1], LONG[0], LONG[2], [7, 8, 9], LONG[1][:300]]  # a repeated prompt (GRPO's n), a short one
PARAMS = [SamplingParams(max_new_tokens=12, temperature=0.6, top_p=0.9, seed=1),
          SamplingParams(max_new_tokens=7, temperature=1.0, seed=2, top_logprobs=3),
          SamplingParams(max_new_tokens=12, temperature=0.6, top_p=0.9, seed=5),
          SamplingParams(max_new_tokens=9, greedy=True),
          SamplingParams(max_new_tokens=20, temperature=1.0, top_k=20, seed=3),
          SamplingParams(max_new_tokens=5, temperature=0.6, seed=9)]


@pytest.fixture(params=["qwen2", "llama-sdpa", "llama-eager"])
def model(request, tiny_model):
    return tiny_model[0] if request.param == "qwen2" else llama(request.param.split("-")[1])


def run(model, requests, split: bool, decode: str = "eager", alone: bool = False):
    async def go():
        eng = HFEngine(model, decode=decode)
        eng._split_prefill = split
        if alone:
            out = [await eng.generate(p, s) for p, s in requests]
        else:
            out = await asyncio.gather(*(eng.generate(p, s) for p, s in requests))
        await eng.close()
        return out, eng

    return asyncio.run(go())


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_split_prefill_gives_the_padded_prefills_tokens_and_logprobs(model, monkeypatch, decode):
    calls = []
    real = hf_batch._prefill_by_length
    monkeypatch.setattr(hf_batch, "_prefill_by_length", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    requests = list(zip(PROMPTS, PARAMS))
    padded, _ = run(model, requests, split=False, decode=decode)
    assert not calls
    split, eng = run(model, requests, split=True, decode=decode)
    assert max(eng.stats.batch_sizes) == 6 and calls == [[700, 530, 600, 3, 300]]  # one batch, five distinct prompts
    assert_same(padded, split)
    alone, _ = run(model, requests, split=True, decode=decode, alone=True)
    assert_same(alone, split)  # a row does not depend on the rows beside it


def test_short_or_equal_prompts_keep_one_padded_prefill(tiny_model, monkeypatch):
    calls = []
    monkeypatch.setattr(hf_batch, "_prefill_by_length", lambda *a, **k: calls.append(a[3]))
    short = [([1, 2, 3] * 20, PARAMS[0]), ([4, 5] * 7, PARAMS[1])]  # longest below the threshold
    same = [(LONG[0], PARAMS[0]), (LONG[0][::-1], PARAMS[1])]  # long, one length: no mask to build
    run(tiny_model[0], short, split=True)
    run(tiny_model[0], same, split=True)
    assert calls == [] and hf_batch.SPLIT_PREFILL_TOKENS == 512
    assert hf_batch.masks_materialize(tiny_model[0])  # the CPU: split is the engine's default here
    assert HFEngine(tiny_model[0])._split_prefill


def test_the_joined_cache_is_the_padded_one_with_the_same_reserve(tiny_model):
    from memrl.engines.hf_batch import cache_keyword, left_padded, prefill
    from memrl.engines.kv_cache import reserved_cache

    model = tiny_model[0]
    prompts = [LONG[0], LONG[1], LONG[0], [7, 8, 9]]
    ids, attention, positions = left_padded(prompts, 0, torch.device("cpu"))
    got = {}
    with torch.inference_mode():
        for split in (False, True):
            cache = reserved_cache(ids.shape[1] + 50)  # the prompt width + the decode reserve
            got[split] = prefill(model, cache_keyword(model), cache, prompts, ids, attention, positions, split=split)
            layer = cache.layers[0]
            assert layer.filled == ids.shape[1] == 700 and layer._k.shape[-2] == 750 and layer.keys.shape[0] == 4
            got[split, "keys"] = layer.keys.transpose(1, 2)[attention.bool()]  # every row's real positions
    assert torch.allclose(got[True], got[False], atol=1e-5)
    assert torch.allclose(got[True, "keys"], got[False, "keys"], atol=1e-5)


def test_long_requests_joining_a_decoding_batch_prefill_by_length_too(tiny_model, monkeypatch):
    from tests.engines.test_hf_join import _alone, _while_decoding

    calls = []
    real = hf_batch._prefill_by_length
    monkeypatch.setattr(hf_batch, "_prefill_by_length", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    model = tiny_model[0]
    first = ([5, 6, 7], SamplingParams(max_new_tokens=300, temperature=1.0, seed=1))  # keeps the batch decoding
    later = [(LONG[0], PARAMS[0]), (LONG[1], PARAMS[1]), (LONG[2], PARAMS[3])]
    eng = HFEngine(model, long_new_tokens=100_000, continuous_batching=True)
    joined = asyncio.run(_while_decoding(eng, first, later))
    assert eng.stats.joined == 3 and eng.stats.batches == 1 and [700, 530, 600] in calls
    assert_same(asyncio.run(_alone(HFEngine(model), [first, *later])), joined)
