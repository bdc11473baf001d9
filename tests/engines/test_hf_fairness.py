"""HF engine budgets: a long request decodes apart and sizes only its own memory (issue: one request blocked all)."""

from __future__ import annotations

import asyncio

from memrl.engines import hf
from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine

SHORT = SamplingParams(max_new_tokens=4, greedy=True)
ENDLESS = SamplingParams(max_new_tokens=100_000, greedy=True)  # the tiny model never says EOS on [5, 6, 7]


def test_a_short_request_arriving_during_a_long_batch_is_answered_while_it_runs(tiny_model):
    model, _ = tiny_model
    eng = HFEngine(model)

    async def go():
        longs = [asyncio.ensure_future(eng.generate([5, 6, 7], ENDLESS)) for _ in range(4)]
        while eng.stats.generated_tokens == 0:  # the long batch is decoding
            await asyncio.sleep(0.01)
        short = await asyncio.wait_for(eng.generate([5, 6], SHORT), 60)
        still_running = not any(t.done() for t in longs)
        for t in longs:
            t.cancel()
        await asyncio.gather(*longs, return_exceptions=True)
        await eng.idle()
        await eng.close()
        return short, still_running

    short, still_running = asyncio.run(go())
    assert len(short.token_ids) == 4 and still_running
    # two long rows fill the 262,144-token batch budget; the short request had a batch of its own beside them
    assert eng.stats.batch_sizes[:2] == [2, 1]


def test_kv_reserve_is_capped_not_the_longest_budget_of_the_batch(tiny_model, monkeypatch):
    model, _ = tiny_model
    capacities = []
    real = hf.reserved_cache
    monkeypatch.setattr(hf, "reserved_cache", lambda capacity: capacities.append(capacity) or real(capacity))
    eng = HFEngine(model, long_new_tokens=10**6, reserve_new_tokens=16)

    async def go():
        mixed = [eng.generate([5, 6, 7], SHORT), eng.generate([5, 6, 7, 8], SamplingParams(max_new_tokens=40,
                                                                                            greedy=True))]
        results = await asyncio.gather(*mixed)
        await eng.close()
        return results

    short, longer = asyncio.run(go())
    assert capacities == [4 + 16]  # prompt width + the reserve, not + 40
    assert len(longer.token_ids) == 40 or longer.finish_reason == "stop"  # the cache grew past the reserve
    alone = HFEngine(model)
    again = asyncio.run(alone.generate([5, 6, 7, 8], SamplingParams(max_new_tokens=40, greedy=True)))
    assert again.token_ids == longer.token_ids


def test_owners_take_turns_in_the_queue_and_requests_without_one_keep_arrival_order():
    from memrl.engines.hf_batch import Request, fair_order

    def req(owner, tag):
        r = Request([1], SHORT, None, None, owner=owner)  # type: ignore[arg-type]
        r.prompt = [tag]
        return r

    big, small = object(), object()
    queue = [req(big, i) for i in range(4)] + [req(small, 10), req(small, 11)]
    assert [r.prompt[0] for r in fair_order(queue)] == [0, 10, 1, 11, 2, 3]
    plain = [req(None, i) for i in range(5)]
    assert fair_order(plain) == plain


def test_a_served_request_of_many_sequences_does_not_hold_back_another_clients_prompt(tiny_model):
    """max_batch_size 2: one request's 6 sequences queued first, then another's 1; it rides in the second batch."""
    from memrl.engines.base import REQUEST_OWNER

    model, _ = tiny_model
    eng = HFEngine(model, max_batch_size=2, batch_wait_s=0.05)
    finished: list[str] = []

    async def client(name, n):
        REQUEST_OWNER.set(object())  # what memrl serve does per HTTP request
        await asyncio.gather(*(eng.generate([5, 6, 7], SHORT) for _ in range(n)))
        finished.append(name)

    async def go():
        big = asyncio.ensure_future(client("big", 6))
        await asyncio.sleep(0)
        small = asyncio.ensure_future(client("small", 1))
        await asyncio.gather(big, small)
        await eng.close()

    asyncio.run(go())
    assert finished == ["small", "big"] and eng.stats.batch_sizes[:4] == [2, 2, 2, 1]
