"""Continuous batching: requests that arrive while a batch decodes join it, and generate what they would alone."""

from __future__ import annotations

import asyncio

import pytest
import torch

from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine, cache_keyword
from memrl.engines.hf_batch import EagerStepper, Request, left_padded, prefill
from memrl.engines.hf_join import pick_joiners
from memrl.engines.kv_cache import append_rows, reserved_cache

LONG = SamplingParams(max_new_tokens=300, temperature=1.0, seed=1)  # keeps the first batch decoding


def texts(tok, *words: str) -> list[list[int]]:
    return [tok.encode(w, add_special_tokens=False) for w in words]


async def _while_decoding(eng: HFEngine, first: tuple[list[int], SamplingParams],
                          later: list[tuple[list[int], SamplingParams]]) -> list:
    """Start ``first``; once its batch decodes, send ``later`` (they arrive mid-batch)."""
    head = asyncio.ensure_future(eng.generate(*first))
    while not eng._lanes[0].running:
        await asyncio.sleep(0.001)
    rest = await asyncio.gather(*[eng.generate(p, s) for p, s in later])
    out = [await head, *rest]
    await eng.close()
    return out


async def _alone(eng: HFEngine, calls: list[tuple[list[int], SamplingParams]]) -> list:
    out = [await eng.generate(p, s) for p, s in calls]
    await eng.close()
    return out


def test_requests_sent_mid_batch_join_it_and_generate_what_they_would_alone(tiny_model):
    model, tok = tiny_model
    first = (texts(tok, "a")[0], LONG)
    later = [(p, SamplingParams(max_new_tokens=12, temperature=1.0, seed=10 + k, top_logprobs=2))
             for k, p in enumerate(texts(tok, "the key is 42 and the value is", "hi",
                                         "the key is 42 and the value is"))]
    later.append((later[1][0], SamplingParams(max_new_tokens=9, greedy=True)))
    eng = HFEngine(model, long_new_tokens=100_000, continuous_batching=True)
    joined = asyncio.run(_while_decoding(eng, first, later))
    assert eng.stats.joined == len(later) and eng.stats.batches == 1  # nobody waited for the 300 tokens
    alone = asyncio.run(_alone(HFEngine(model, continuous_batching=False), [first, *later]))
    for j, a in zip(joined, alone):
        assert j.token_ids == a.token_ids
        assert j.logprobs == pytest.approx(a.logprobs, abs=1e-5)
        assert j.finish_reason == a.finish_reason
    assert [len(t) for t in joined[1].meta["top_logprobs"]] == [2] * 12


def test_without_continuous_batching_a_late_request_waits_for_the_next_batch(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(model, long_new_tokens=100_000, continuous_batching=False)
    short = (texts(tok, "hi")[0], SamplingParams(max_new_tokens=3, greedy=True))
    asyncio.run(_while_decoding(eng, (texts(tok, "a")[0], SamplingParams(max_new_tokens=40, greedy=True)), [short]))
    assert eng.stats.joined == 0 and eng.stats.batches == 2


def test_joining_respects_the_batch_size(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(model, long_new_tokens=100_000, max_batch_size=2, continuous_batching=True)
    later = [(p, SamplingParams(max_new_tokens=4, greedy=True)) for p in texts(tok, "one", "two two", "three")]
    asyncio.run(_while_decoding(eng, (texts(tok, "a")[0], LONG), later))
    assert eng.stats.joined == len(later) and eng.stats.batches == 1  # each joined as a row became free
    assert eng.stats.peak_rows == 2


async def _joined(eng: HFEngine, head: tuple[list[int], SamplingParams], late: tuple[list[int], SamplingParams],
                  ) -> tuple[asyncio.Future, asyncio.Future]:
    """``head`` decoding, and ``late`` sent after it started and now a row of its batch."""
    first = asyncio.ensure_future(eng.generate(*head))
    while not eng._lanes[0].running:
        await asyncio.sleep(0.001)
    second = asyncio.ensure_future(eng.generate(*late))
    while eng.stats.joined == 0:
        await asyncio.sleep(0.001)
    return first, second


def test_an_interrupt_cuts_the_rows_that_joined(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(model, long_new_tokens=100_000, continuous_batching=True)

    async def go():
        head, late = await _joined(eng, (texts(tok, "a")[0], LONG), (texts(tok, "hello")[0], LONG.with_(seed=2)))
        eng.interrupt()
        out = await asyncio.gather(head, late)
        await eng.close()
        return out

    head, late = asyncio.run(go())
    assert head.finish_reason == late.finish_reason == "abort"
    assert len(late.token_ids) < 300 and len(head.token_ids) < 300


def test_a_joined_request_cancelled_by_its_caller_leaves_the_batch(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(model, long_new_tokens=100_000, continuous_batching=True)

    async def go():
        head, late = await _joined(eng, (texts(tok, "a")[0], SamplingParams(max_new_tokens=60, greedy=True)),
                                   (texts(tok, "hello")[0], SamplingParams(max_new_tokens=100_000, greedy=True)))
        late.cancel()
        first = await head
        await eng.idle()
        await eng.close()
        return first

    first = asyncio.run(go())
    assert len(first.token_ids) == 60 and eng.stats.generated_tokens < 10_000


def test_nobody_joins_a_batch_that_a_weight_update_waits_for(tiny_model):
    """Else a stream of newcomers would keep the batch, and the update, going for ever."""
    model, tok = tiny_model
    eng = HFEngine(model, long_new_tokens=100_000, continuous_batching=True)

    async def go():
        head = asyncio.ensure_future(eng.generate(texts(tok, "a")[0], SamplingParams(max_new_tokens=80, greedy=True)))
        while not eng._lanes[0].running:
            await asyncio.sleep(0.001)
        update = asyncio.ensure_future(eng.update_weights({}))
        await asyncio.sleep(0)  # the update now waits for the batch
        late = await eng.generate(texts(tok, "hi")[0], SamplingParams(max_new_tokens=3, greedy=True))
        first = await head
        await update
        await eng.close()
        return first, late

    first, late = asyncio.run(go())
    assert eng.stats.joined == 0 and eng.stats.batches == 2
    assert first.meta["weight_version"] == 0 and late.meta["weight_version"] == 1


def test_appended_cache_rows_give_the_logits_of_separate_caches(tiny_model):
    """Two prefilled groups of different widths, appended, decode one step as each group does alone."""
    model, tok = tiny_model
    kw = cache_keyword(model)
    groups = [texts(tok, "the key is 42 and the value is", "a"), texts(tok, "hello world")]

    def prefilled(prompts):
        ids, att, pos = left_padded(prompts, 0, torch.device("cpu"))
        cache = reserved_cache(ids.shape[1] + 4)
        prefill(model, kw, cache, prompts, ids, att, pos)
        return cache, att, pos[:, -1]

    def step(cache, att, last):
        rows = att.shape[0]
        return model(input_ids=torch.ones((rows, 1), dtype=torch.long), use_cache=True, **{kw: cache},
                     attention_mask=torch.cat([att, att.new_ones(rows, 1)], 1), position_ids=last[:, None] + 1
                     ).logits[:, -1]

    alone = torch.cat([step(*prefilled(p)) for p in groups])
    (c0, a0, l0), (c1, a1, l1) = [prefilled(p) for p in groups]
    width = append_rows(c0, c1)
    assert width == max(a0.shape[1], a1.shape[1]) and a0.shape[1] != a1.shape[1]
    att = torch.cat([torch.nn.functional.pad(a, (width - a.shape[1], 0)) for a in (a0, a1)])
    torch.testing.assert_close(step(c0, att, torch.cat([l0, l1])), alone, atol=1e-5, rtol=0)


def test_a_joined_batch_drops_the_padding_columns_of_rows_that_left(tiny_model):
    """Else a batch that keeps admitting rows would carry every column of its history."""
    model, tok = tiny_model
    kw = cache_keyword(model)
    long_prompt, short_prompt, joiner = texts(tok, "the key is 42 and the value is", "a", "hi there")

    def prefilled(prompts):
        ids, att, pos = left_padded(prompts, 0, torch.device("cpu"))
        cache = reserved_cache(ids.shape[1] + 4)
        logits = prefill(model, kw, cache, prompts, ids, att, pos)
        return cache, att, pos[:, -1], logits

    cache, att, last, _ = prefilled([long_prompt, short_prompt])
    stepper = EagerStepper(model, kw, cache, att, last)
    stepper.drop([1])  # the long row leaves: its padding columns are masked in every live row
    c2, a2, l2, _ = prefilled([joiner])
    stepper.admit(c2, a2, l2)
    assert stepper.width == max(len(short_prompt), len(joiner)) < len(long_prompt)
    merged = stepper.forward([5, 5])
    alone = [EagerStepper(model, kw, *prefilled([p])[:3]).forward([5]) for p in (short_prompt, joiner)]
    torch.testing.assert_close(merged, torch.cat(alone), atol=1e-5, rtol=0)


def test_requests_that_fail_to_join_wait_for_the_next_batch_and_the_batch_goes_on(tiny_model, monkeypatch):
    import memrl.engines.hf_join as hf_join

    model, tok = tiny_model
    real = hf_join.prefill
    calls = {"n": 0}

    def once_out_of_memory(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_join, "prefill", once_out_of_memory)
    first = (texts(tok, "a")[0], SamplingParams(max_new_tokens=40, temperature=1.0, seed=3))
    late = (texts(tok, "hello")[0], SamplingParams(max_new_tokens=6, temperature=1.0, seed=4))
    eng = HFEngine(model, long_new_tokens=100_000, continuous_batching=True)
    joined = asyncio.run(_while_decoding(eng, first, [late]))
    assert calls["n"] == 1 and eng.stats.batch_sizes == [1, 1]  # no one-by-one retry of the whole batch
    alone = asyncio.run(_alone(HFEngine(model, continuous_batching=False), [first, late]))
    assert [r.token_ids for r in joined] == [r.token_ids for r in alone]


def _req(loop: asyncio.AbstractEventLoop, prompt: list[int], new: int, done: bool = False) -> Request:
    fut = loop.create_future()
    if done:
        fut.cancel()
    return Request(prompt, SamplingParams(max_new_tokens=new), fut, None)


def test_pick_joiners_keeps_the_limits_of_a_new_batch():
    loop = asyncio.new_event_loop()
    pending = [_req(loop, [1] * 10, 5), _req(loop, [1] * 3, 5, done=True), _req(loop, [2] * 50, 5),
               _req(loop, [3] * 4, 500)]
    picked = pick_joiners(pending, live=2, width=20, tokens_left=30, max_rows=8, max_tokens=1000, attention_cap=None)
    # (20 + 30) * 3 = 150 fits; the 50-token prompt makes (50 + 30) * 4 = 320 fit too; the last needs 4000 > 1000
    assert [len(r.prompt) for r in picked] == [10, 50]
    assert [len(r.prompt) for r in pending] == [4]  # the cancelled one is dropped (nobody waits for it)
    assert pick_joiners(pending, live=8, width=1, tokens_left=1, max_rows=8, max_tokens=10**9,
                        attention_cap=None) == []
    loop.close()


def test_training_keeps_fixed_batches_and_memrl_serve_joins():
    """Off by default (a training run stays bitwise reproducible); a server's clients arrive whenever."""
    from memrl.config import load_config
    from memrl.serve.server import _load

    assert load_config(None, []).engine.continuous_batching is False
    _, engine = _load("hf", "tiny", "float32", 4, None)
    assert engine.continuous_batching is True
