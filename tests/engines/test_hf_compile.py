"""``engine.decode=compiled``: the static step through ``torch.compile`` (memrl.engines.hf_compile), on the CPU.

With the ``eager`` backend Dynamo traces the step and replays the same ops: tokens and log-probs must equal
the eager engine's exactly as the static path's do. With inductor (real code generation, a C++ compiler
here) the fused kernels round differently: greedy tokens equal, log-probs to float32 rounding.
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from memrl.engines import hf_compile
from memrl.engines.base import SamplingParams
from memrl.engines.hf import HFEngine
from memrl.engines.hf_compile import packed_decode_attention
from memrl.engines import hf_static as hs
from memrl.engines.hf_static import StaticDecoder
from tests.engines.test_hf_static import MIXED, PROMPTS, assert_same, llama
from tests.engines.test_hf_static_capturable import EmulatedGraph


class _Attention(torch.nn.Module):
    num_key_value_groups = 3  # 6 query heads over 2 key/value heads


def _by_hand(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Attention written out per row and query head: head h reads key/value head h // groups."""
    b, heads, _, dim = q.shape
    groups = heads // k.shape[1]
    out = torch.empty(b, 1, heads, dim)
    for r in range(b):
        for h in range(heads):
            kh, vh = k[r, h // groups], v[r, h // groups]
            scores = [float(q[r, h, 0] @ kh[j]) / math.sqrt(dim) + float(mask[r, 0, 0, j]) for j in range(kh.shape[0])]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            out[r, 0, h] = sum(w / total * vh[j] for j, w in enumerate(weights))
    return out


def test_packed_attention_of_one_token_equals_attention_written_out():
    """2 rows, 6 query heads on 2 key/value heads, 5 positions; row 0 masks positions 0-1 (dtype min)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 6, 1, 4, generator=g), torch.randn(2, 2, 5, 4, generator=g), torch.randn(2, 2, 5, 4, generator=g)
    mask = torch.zeros(2, 1, 1, 5)
    mask[0, 0, 0, :2] = torch.finfo(torch.float32).min
    hf_compile.install_packed_decode()
    out, weights = packed_decode_attention(_Attention(), q, k, v, mask, scaling=0.5)  # 1/sqrt(4)
    assert weights is None and out.shape == (2, 1, 6, 4)
    assert torch.allclose(out, _by_hand(q, k, v, mask), atol=1e-6)


def test_other_attention_calls_go_to_transformers_unchanged():
    """A prompt (3 query tokens, causal, no mask) is transformers' sdpa call, bit for bit."""
    hf_compile.install_packed_decode()
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(1, 6, 3, 4, generator=g), torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 2, 3, 4, generator=g)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    ours, _ = packed_decode_attention(_Attention(), q, k, v, None, scaling=0.5)
    theirs, _ = sdpa_attention_forward(_Attention(), q, k, v, None, scaling=0.5)
    assert torch.equal(ours, theirs)


def _run(model, mode, requests):
    async def go():
        eng = HFEngine(model, decode=mode)
        out = await asyncio.gather(*(eng.generate(p, s) for p, s in requests))
        await eng.close()
        return out, eng

    return asyncio.run(go())


def test_traced_step_gives_the_eager_tokens_and_is_not_traced_again_every_step(monkeypatch):
    """Six mixed requests (buckets 8 -> 4 -> 2 -> 1 as rows end): the eager engine's tokens and log-probs;
    Dynamo traces a handful of graphs (a new shape, then dynamic sizes), not one per step."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(hf_compile, "BACKEND", "eager")
    torch._dynamo.reset()
    counters.clear()
    model = llama()
    requests = list(zip(PROMPTS, MIXED))
    eager, _ = _run(model, "eager", requests)
    compiled, eng = _run(model, "compiled", requests)
    assert_same(eager, compiled)
    step = eng._static.step
    assert isinstance(step, hf_compile.CompiledStep) and step.error is None and step.compiled is not None
    assert 1 <= counters["stats"]["unique_graphs"] <= 4  # 24 steps decoded
    assert eng.describe() == "hf decode: static KV cache, compiled with torch.compile (fused kernels) " \
                             "(no CUDA graphs off a GPU)"


def test_a_compile_failure_decodes_on_without_it(monkeypatch, tiny_model):
    """An unknown backend fails at the first step: the batch decodes on the plain step, the reason is kept."""
    monkeypatch.setattr(hf_compile, "BACKEND", "no-such-backend")
    requests = [(PROMPTS[0], SamplingParams(max_new_tokens=6, greedy=True))]
    eager, _ = _run(tiny_model[0], "eager", requests)
    compiled, eng = _run(tiny_model[0], "compiled", requests)
    assert_same(eager, compiled)
    assert eng._static.step.compiled is None and "no-such-backend" in eng._static.step.error


def test_compiled_needs_a_model_the_static_path_runs():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True, sliding_window=8,
                      layer_types=["sliding_attention"])
    with pytest.raises(ValueError, match="engine.decode=compiled cannot run this model"):
        HFEngine(Qwen2ForCausalLM(cfg), decode="compiled")


def _small_llama(hidden: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


def test_engines_of_many_model_shapes_each_stay_compiled(monkeypatch):
    """Dynamo keeps at most 8 graphs per code object and past that runs it uncompiled, silently: five model
    shapes x (a batch of 3, a batch of 1) would pass it if every engine's step shared one code object."""
    monkeypatch.setattr(hf_compile, "BACKEND", "eager")
    torch._dynamo.reset()
    torch.manual_seed(0)
    steps = []
    for hidden in (32, 48, 64, 80, 96):
        model = _small_llama(hidden)
        for n in (3, 1):
            _, eng = _run(model, "compiled", [([5 + i, 6, 7], SamplingParams(max_new_tokens=2, greedy=True))
                                              for i in range(n)])
            steps.append(eng._static.step)
    assert [s.graphs for s in steps] == [1] * len(steps)  # a fresh engine each time: its own code, compiled
    assert len({s.plain.__code__ for s in steps}) == len(steps)


def test_a_failed_capture_of_the_compiled_step_captures_the_plain_step(monkeypatch):
    """A CUDA graph capture that fails over compiled code turns compile off (named in its error) and captures
    the plain step, keeping graphs (it turned both off); tokens stay the eager engine's."""
    monkeypatch.setattr(hf_compile, "BACKEND", "eager")
    model = llama()
    calls = []

    def capture(step, pool):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("operation not permitted when stream is capturing")
        graph = EmulatedGraph(step, [])
        return graph, graph.logits

    monkeypatch.setattr(hs, "capture_graph", capture)
    requests = [(PROMPTS[0], SamplingParams(max_new_tokens=5, greedy=True))]

    async def go():
        eng = HFEngine(model, decode="compiled")
        eng._static = StaticDecoder(model, eng.cache_kw, graphs=True, compiled=True)
        out = await asyncio.gather(*(eng.generate(p, s) for p, s in requests))
        await eng.close()
        return out, eng._static

    eager, _ = _run(model, "eager", requests)
    compiled, decoder = asyncio.run(go())
    assert decoder.graphs and decoder.graph_error is None and decoder.captures == 1 and len(calls) == 2
    assert decoder.step.error.startswith("CUDA graph capture of the compiled step: RuntimeError: operation not")
    assert_same(eager, compiled)


@pytest.mark.skipif(hf_compile.compile_unsupported(torch.device("cpu")) is not None,
                    reason="no C++ compiler: inductor cannot build CPU kernels here")
def test_inductor_fused_step_gives_the_eager_greedy_tokens(tiny_model):
    """Real code generation: two greedy prompts of one bucket, 12 tokens each (one compile, ~15 s here)."""
    torch._dynamo.reset()
    requests = [(PROMPTS[0], SamplingParams(max_new_tokens=12, greedy=True)),
                (PROMPTS[2], SamplingParams(max_new_tokens=12, greedy=True))]
    eager, _ = _run(tiny_model[0], "eager", requests)
    compiled, eng = _run(tiny_model[0], "compiled", requests)
    assert eng._static.step.error is None and eng._static.step.seconds > 0 and eng._static.step.graphs == 1
    for e, c in zip(eager, compiled):
        assert c.token_ids == e.token_ids
        assert c.logprobs == pytest.approx(e.logprobs, abs=1e-4)


@pytest.mark.skipif(hf_compile.compile_unsupported(torch.device("cpu")) is not None,
                    reason="no C++ compiler: inductor cannot build CPU kernels here")
def test_inductor_in_bfloat16_rounds_as_the_eager_ops_do():
    """bfloat16, the six mixed requests: the fused kernels round every intermediate as eager ops do, so the
    compiled step's seeded samples are the static step's (without emulated casts 3 of 6 rows differed here,
    greedy log-probs by 8e-3; with them every row and log-prob was equal: one row of slack for a machine whose
    vector code sums in another order)."""
    from memrl.models.resolve import load_model

    torch._dynamo.reset()
    model = load_model("tiny", device="cpu").to(torch.bfloat16)
    requests = list(zip(PROMPTS, MIXED))
    static, _ = _run(model, "static", requests)
    compiled, eng = _run(model, "compiled", requests)
    assert eng._static.step.error is None and eng._static.step.graphs >= 1
    same = [s.token_ids == c.token_ids for s, c in zip(static, compiled)]
    assert sum(same) >= 5, same
    gaps = [abs(x - y) for s, c, ok in zip(static, compiled, same) if ok for x, y in zip(s.logprobs, c.logprobs)]
    assert max(gaps) <= 2e-3
