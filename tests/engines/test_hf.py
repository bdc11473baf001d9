import asyncio
import contextlib

import pytest
import torch

from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine

GREEDY = SamplingParams(max_new_tokens=12, greedy=True)


def run(coro):
    return asyncio.run(coro)


def prompts(tok):
    texts = ["hello world", "the key is 42 and the value is", "a", "Document 1: Paris is the capital of France."]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_batched_greedy_matches_transformers_generate_and_logprobs(tiny_model):
    model, tok = tiny_model
    eng = HFEngine(model)

    async def go():
        out = await asyncio.gather(*[eng.generate(p, GREEDY) for p in prompts(tok)])
        await eng.close()
        return out

    results = run(go())
    assert max(eng.stats.batch_sizes) == 4  # all four decoded together (left padded)
    for p, r in zip(prompts(tok), results):
        ref = model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                             pad_token_id=tok.pad_token_id)[0, len(p):].tolist()
        assert r.token_ids == ref
        logits = model(torch.tensor([p + r.token_ids])).logits[0, len(p) - 1:-1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(r.token_ids)[:, None])[:, 0]
        assert torch.allclose(lp, torch.tensor(r.logprobs), atol=1e-4)
        assert r.finish_reason == "length"


def test_per_request_limits_and_stop_tokens(tiny_model):
    model, tok = tiny_model
    p = prompts(tok)[1]
    eng = HFEngine(model)

    async def go():
        base = await eng.generate(p, GREEDY)
        stop = base.token_ids[3]
        first = base.token_ids.index(stop)
        stopped, short, zero = await asyncio.gather(
            eng.generate(p, GREEDY.with_(stop_token_ids=(stop,))),
            eng.generate(p, GREEDY.with_(max_new_tokens=2)),
            eng.generate(p, GREEDY.with_(max_new_tokens=0)),
        )
        await eng.close()
        return base, first, stopped, short, zero

    base, first, stopped, short, zero = run(go())
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == base.token_ids[: first + 1]  # the stop token is kept
    assert short.token_ids == base.token_ids[:2] and short.finish_reason == "length"
    assert zero.token_ids == [] and zero.finish_reason == "length"


def test_seeded_sampling_is_reproducible(tiny_model):
    """Same seed, same prompt: same token ids in any batch; log-probs equal up to float rounding.

    Two rows of one batch are not bit-identical (CPU matrix kernels sum a row differently
    depending on its position), so log-probs are compared within 1e-5, as the engine documents.
    """
    model, tok = tiny_model
    eng = HFEngine(model)
    p = prompts(tok)[0]
    s = SamplingParams(max_new_tokens=16, temperature=1.0)

    async def go():
        a, b, c = await asyncio.gather(eng.generate(p, s.with_(seed=1)), eng.generate(p, s.with_(seed=1)),
                                       eng.generate(p, s.with_(seed=2)))
        alone = await eng.generate(p, s.with_(seed=1))
        await eng.close()
        return a, b, c, alone

    a, b, c, alone = run(go())
    assert a.token_ids == b.token_ids == alone.token_ids
    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert a.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    assert a.token_ids != c.token_ids  # a random 99K-param model is near uniform: 16 draws differ


def test_update_weights(tiny_model):
    _, tok = tiny_model
    from memrl.models.resolve import load_model

    model = load_model("tiny", device="cpu")
    eng = HFEngine(model)
    p = prompts(tok)[1]

    async def go():
        before = await eng.generate(p, GREEDY)
        sd = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
        await eng.update_weights(sd)
        after = await eng.generate(p, GREEDY)
        with pytest.raises(KeyError, match="unknown parameter"):
            await eng.update_weights({"nope.weight": torch.zeros(1)})
        await eng.close()
        return before, after

    before, after = run(go())
    assert before.token_ids != after.token_ids
    assert eng.weight_version == 1


def test_empty_prompt_rejected(tiny_model):
    eng = HFEngine(tiny_model[0])
    with pytest.raises(ValueError):
        run(eng.generate([], GREEDY))


@pytest.mark.parametrize("bad", [[5, 387], [5, -1], [5, 2.0], ["5"]])
def test_prompt_ids_outside_the_vocabulary_are_rejected(tiny_model, bad):
    eng = HFEngine(tiny_model[0])
    assert eng.vocab_size == 387
    with pytest.raises(ValueError):
        run(eng.generate(bad, GREEDY))


def test_a_failing_request_does_not_fail_its_batch_mates(tiny_model):
    """A request that raises inside the decode loop fails alone; the rest of its batch is answered."""
    model, tok = tiny_model
    eng = HFEngine(model)
    ps = prompts(tok)
    nan = SamplingParams(max_new_tokens=4, temperature=1e-45)  # logits / 1e-45 = inf: multinomial raises
    seeded = SamplingParams(max_new_tokens=6, temperature=1.0, seed=7)

    async def go():
        alone = [await eng.generate(p, GREEDY) for p in ps] + [await eng.generate(ps[0], seeded)]
        mixed = await asyncio.gather(*[eng.generate(p, GREEDY) for p in ps], eng.generate(ps[0], seeded),
                                     eng.generate(ps[1], nan), return_exceptions=True)
        await eng.close()
        return alone, mixed

    alone, mixed = run(go())
    assert max(eng.stats.batch_sizes) == 6  # all six were in one batch before it failed
    assert isinstance(mixed[-1], RuntimeError)
    for a, m in zip(alone, mixed[:-1]):
        assert m.token_ids == a.token_ids  # the seeded one restarts its draws when decoded again
        assert m.logprobs == pytest.approx(a.logprobs, abs=1e-5)


def test_a_step_that_raises_spends_no_draw_of_the_engines_generator(tiny_model):
    """An unseeded request batched with one that raises is decoded again alone from the engine's generator:
    the failed step's draw is not spent, so it gets the tokens it gets without the culprit."""
    model, tok = tiny_model
    ps = prompts(tok)
    unseeded = SamplingParams(max_new_tokens=8, temperature=1.0)
    nan = SamplingParams(max_new_tokens=4, temperature=1e-45)

    async def go(with_culprit: bool):
        eng = HFEngine(model, seed=11)
        calls = [eng.generate(ps[0], unseeded)] + ([eng.generate(ps[1], nan)] if with_culprit else [])
        out = await asyncio.gather(*calls, return_exceptions=True)
        await eng.close()
        return out

    mixed, alone = run(go(True)), run(go(False))
    assert isinstance(mixed[1], RuntimeError)
    assert mixed[0].token_ids == alone[0].token_ids


def test_a_huge_top_k_is_no_limit_and_never_fails_its_batch(tiny_model):
    """``top_k=10**20`` from a client overflowed the batch's int64 tensor: every batch-mate was then decoded
    again alone. It means what any top_k past the vocabulary means, no limit, and the batch runs once."""
    model, tok = tiny_model
    eng = HFEngine(model)
    ps = prompts(tok)
    huge = [SamplingParams(max_new_tokens=6, temperature=1.0, seed=3, top_k=k) for k in (10**20, -10**20)]
    off = SamplingParams(max_new_tokens=6, temperature=1.0, seed=3)

    async def go():
        want = await eng.generate(ps[0], off)
        eng.stats.batch_sizes.clear()
        got = await asyncio.gather(*[eng.generate(p, GREEDY) for p in ps], *[eng.generate(ps[0], h) for h in huge])
        await eng.close()
        return want, got

    want, got = run(go())
    assert eng.stats.batch_sizes == [len(ps) + 2]  # one batch, no one-at-a-time rerun
    assert got[-1].token_ids == got[-2].token_ids == want.token_ids


def test_cancelled_request_leaves_the_batch_and_short_ones_are_answered_first(tiny_model):
    """A long row does not hold back a short batch-mate, and cancelling it stops its decoding."""
    model, tok = tiny_model
    eng = HFEngine(model, long_new_tokens=200_000)  # one lane: the long row shares the short one's batch
    ps = prompts(tok)
    endless = SamplingParams(max_new_tokens=100_000, greedy=True)  # fits one batch with the short one

    async def go():
        long_task = asyncio.ensure_future(eng.generate(ps[0], endless))
        short = await asyncio.wait_for(eng.generate(ps[1], GREEDY), 300)
        assert not long_task.done()  # the short request was answered while the long one decodes
        long_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long_task
        await eng.idle()  # the batch ends once the cancelled row is dropped
        after = await eng.generate(ps[1], GREEDY)
        await eng.close()
        return short, after

    short, after = run(go())
    assert eng.stats.batch_sizes[0] == 2 and short.token_ids == after.token_ids
    assert eng.stats.generated_tokens < 50_000


def test_interrupt_returns_the_tokens_so_far_and_a_continuation_matches_the_whole(tiny_model):
    """interrupt(): a decoding row leaves at its next step with its tokens (abort); greedy decoding then
    goes on from them to the same tokens an uninterrupted request gives."""
    model, tok = tiny_model
    eng = HFEngine(model, long_new_tokens=200_000)
    ps = prompts(tok)
    n = 400
    params = SamplingParams(max_new_tokens=n, greedy=True)

    passes = []
    hook = model.register_forward_hook(lambda *_: passes.append(1))

    async def go():
        whole = await eng.generate(ps[0], params)
        passes.clear()
        task = asyncio.ensure_future(eng.generate(ps[0], params))
        while len(passes) < 3:  # prefill and two decode steps: some tokens exist, whatever the machine's load
            await asyncio.sleep(0.001)
        eng.interrupt()
        cut = await asyncio.wait_for(task, 60)
        rest = await eng.generate(ps[0] + cut.token_ids, params.with_(max_new_tokens=n - len(cut.token_ids)))
        await eng.close()
        return whole, cut, rest

    try:
        whole, cut, rest = run(go())
    finally:
        hook.remove()
    assert whole.finish_reason == "length" and len(whole.token_ids) == n  # no stop token: all n were decoded
    assert cut.finish_reason == "abort" and 0 < len(cut.token_ids) < n
    assert cut.token_ids == whole.token_ids[: len(cut.token_ids)] and len(cut.logprobs) == len(cut.token_ids)
    assert cut.token_ids + rest.token_ids == whole.token_ids


@pytest.mark.parametrize("held", [False, True])
def test_interrupt_answers_queued_requests_with_no_tokens(tiny_model, held):
    """Queued: waiting for batch-mates, or (``held``) taken by the worker, which then waits for the lock a
    weight update holds (interrupt() found such a request nowhere and it decoded whole after the update)."""
    model, tok = tiny_model
    eng = HFEngine(model, batch_wait_s=0.01 if held else 0.5)

    async def go():
        async with eng._between_batches() if held else contextlib.nullcontext():  # what update_weights holds
            task = asyncio.ensure_future(eng.generate(prompts(tok)[0], GREEDY))
            await asyncio.sleep(0.1 if held else 0.05)  # held: past batch_wait_s, the worker is at the lock
            eng.interrupt()
        res = await asyncio.wait_for(task, 5)
        await eng.close()
        return res

    res = run(go())
    assert res.finish_reason == "abort" and res.token_ids == [] and eng.stats.requests == 0


def test_mixed_sampling_parameters_in_one_batch_match_each_request_alone(tiny_model):
    """Batch-wide sampling keeps each row's temperature/top-k/top-p and seed: same ids as decoded alone."""
    model, tok = tiny_model
    eng = HFEngine(model)
    ps = prompts(tok)
    kinds = [SamplingParams(max_new_tokens=10, temperature=0.7, top_k=5, seed=1),
             SamplingParams(max_new_tokens=7, temperature=1.2, top_p=0.8, seed=2),
             SamplingParams(max_new_tokens=12, greedy=True),
             SamplingParams(max_new_tokens=9, temperature=1.0, top_k=20, top_p=0.9, seed=3)]

    async def go():
        together = await asyncio.gather(*(eng.generate(p, s) for p, s in zip(ps, kinds)))
        alone = [await eng.generate(p, s) for p, s in zip(ps, kinds)]
        await eng.close()
        return together, alone

    together, alone = run(go())
    assert max(eng.stats.batch_sizes) == 4
    for t, a, s in zip(together, alone, kinds):
        assert t.token_ids == a.token_ids
        assert len(t.token_ids) == s.max_new_tokens or t.finish_reason == "stop"
        assert t.logprobs == pytest.approx(a.logprobs, abs=1e-5)


def test_reserved_kv_layer_equals_concatenation_past_its_reserve_and_after_dropping_rows():
    from transformers.cache_utils import DynamicLayer

    from memrl.engines.kv_cache import kv_layer_class as _kv_layer_class

    g = torch.Generator().manual_seed(0)
    reserved, plain = _kv_layer_class()(3), DynamicLayer()  # 3 positions reserved: the 2nd update grows it
    rows = 3
    for length in (2, 1, 4, 1):
        if length == 4:  # drop the middle row between updates, as the engine does for a finished request
            keep = torch.tensor([0, 2])
            reserved.batch_select_indices(keep)
            plain.batch_select_indices(keep)
            rows = 2
        k, v = torch.randn(rows, 2, length, 4, generator=g), torch.randn(rows, 2, length, 4, generator=g)
        got, want = reserved.update(k, v), plain.update(k, v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert reserved.get_seq_length() == plain.get_seq_length()
    assert reserved.get_seq_length() == 8


def test_a_prompt_sent_several_times_is_prefilled_once_and_each_copy_samples_on_its_own(tiny_model):
    """GRPO's n samples of one prompt: one prefill row, the cache repeated; ids as each request alone."""
    model, tok = tiny_model
    eng = HFEngine(model)
    ps = prompts(tok)
    reqs = [(ps[1], SamplingParams(max_new_tokens=8, temperature=1.0, seed=s)) for s in (1, 2, 3)]
    reqs += [(ps[3], SamplingParams(max_new_tokens=6, greedy=True))] * 2 + [(ps[0], GREEDY)]
    prefill_rows = []
    real_forward = model.forward

    def counting(*args, **kwargs):
        if kwargs["input_ids"].shape[1] > 1:  # the prefill (decode steps feed one token)
            prefill_rows.append(kwargs["input_ids"].shape[0])
        return real_forward(*args, **kwargs)

    async def go():
        model.forward = counting
        try:
            together = await asyncio.gather(*(eng.generate(p, s) for p, s in reqs))
        finally:
            del model.forward
        alone = [await eng.generate(p, s) for p, s in reqs]
        await eng.close()
        return together, alone

    together, alone = run(go())
    assert eng.stats.batch_sizes[0] == 6 and prefill_rows == [3]  # 3 distinct prompts
    for t, a in zip(together, alone):
        assert t.token_ids == a.token_ids
        assert t.logprobs == pytest.approx(a.logprobs, abs=1e-5)
    assert together[3].token_ids == together[4].token_ids  # greedy copies agree
    assert len({tuple(t.token_ids) for t in together[:3]}) > 1  # seeded copies do not


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_logprobs_are_temperature_scaled_and_unfiltered(tiny_model, top_p):
    tiny_model, _ = tiny_model
    """The engine's log-prob of a sampled token is log_softmax(logits / T), whatever top-p kept: the trainer's."""
    eng = HFEngine(tiny_model)
    prompt = [5, 6, 7, 8, 9]
    res = asyncio.run(eng.generate(prompt, SamplingParams(max_new_tokens=12, temperature=0.6, top_p=top_p, seed=4)))
    ids = torch.tensor([prompt + res.token_ids])
    with torch.no_grad():
        logits = tiny_model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    want = torch.log_softmax(logits / 0.6, -1).gather(-1, torch.tensor(res.token_ids).unsqueeze(-1)).squeeze(-1)
    raw = torch.log_softmax(logits, -1).gather(-1, torch.tensor(res.token_ids).unsqueeze(-1)).squeeze(-1)
    got = torch.tensor(res.logprobs)
    assert (got - want).abs().max() < 1e-4
    assert (got - raw).abs().mean() > 1e-2  # and not the raw (T = 1) values


def test_long_prompts_of_different_lengths_prefill_fewer_at_a_time(tiny_model):
    """A padded prefill materializes rows x heads x length^2 float32 scores on a CPU: past the cap, long prompts of
    different lengths go in smaller batches, with the same tokens; short prompts and repeats of one prompt do not."""
    from memrl.engines.hf_batch import attention_cap, over_attention

    model, tok = tiny_model
    heads = model.config.num_attention_heads
    assert attention_cap(model, None) == (12 * 2**30, heads)  # a CPU: 12 GiB by default
    cap = (heads * 400 * 400 * 4 * 2, heads)  # two distinct 400-token prompts fit, three do not
    assert not over_attention(cap, 2, {399, 400}) and over_attention(cap, 3, {399, 400})
    assert not over_attention(cap, 9, {400})  # one length: no padding mask, nothing materialized
    long = [[5 + (i + j) % 50 for j in range(400 - i)] for i in range(4)]  # four lengths: padded
    params = SamplingParams(max_new_tokens=3, greedy=True)

    async def go(eng, batch):
        out = await asyncio.gather(*[eng.generate(p, params) for p in batch])
        await eng.close()
        return [r.token_ids for r in out]

    capped = HFEngine(model, max_attention_bytes=cap[0])
    free = HFEngine(model, max_attention_bytes=2**62)
    assert run(go(capped, long)) == run(go(free, long))
    assert max(free.stats.batch_sizes) == 4 and max(capped.stats.batch_sizes) == 2
    repeats = HFEngine(model, max_attention_bytes=cap[0])
    run(go(repeats, [long[0]] * 8))  # one long prompt eight times (GRPO's group): prefilled once, no padding
    assert repeats.stats.batch_sizes == [8]
    short = HFEngine(model, max_attention_bytes=cap[0])
    run(go(short, prompts(tok) * 2))  # short prompts of four lengths: far below the cap
    assert short.stats.batch_sizes == [8]
