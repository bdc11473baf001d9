"""The static decode step (``StaticDecoder._forward``) can be captured as one CUDA graph and replayed (CPU checks).

A CUDA graph records the kernels a step launches, with their arguments and the addresses of the tensors they
read and write, and replays exactly those. So the step must not read device values on the host (the capture
fails, or worse, a branch taken at capture is taken at every replay), must not build tensors from Python
values that change between steps (they are baked in), and must launch the same kernels with the same shapes
at every cache column: only the contents of the pool's tensors (``tokens``, ``positions``, ``mask``, the
write ``column``, the keys and values) may change between replays.

Each check runs the step as the engine does (prefill, ``StaticDecoder.start``, ``StaticDecoder.forward``) on
tiny Qwen2 (sdpa), Llama (sdpa, eager attention) and a peft-LoRA model in eval mode, recording every aten op
with a ``TorchDispatchMode`` and every host read of a tensor (``tolist``, ``__bool__``...: these do not reach
the dispatcher on a CPU tensor) with a ``TorchFunctionMode``:

(a) no op that reads a device value on the host or whose output shape depends on data (aten's
    ``data_dependent_output`` and ``dynamic_output_shape`` tags, ``is_nonzero``; ``index`` only with a boolean
    index) and no host read of a tensor;
(b) no tensor made from Python data: no ``lift_fresh`` (``torch.tensor(...)``), and every tensor an op reads
    is a weight or buffer of the model, a pool tensor, or the output of an earlier op of the step. Factory ops
    without tensor inputs (``arange``, ``zeros``, ``full``, ``scalar_tensor``, ``empty``) are allowed: on a GPU
    they are kernels that fill device memory from constants (no host-to-device copy), so a graph can record
    them; that their constants do not change between steps is (c)'s check, that replaying them is right (d)'s;
(c) two consecutive steps (different cache columns) dispatch the same ops with the same shapes, dtypes and
    Python arguments (a Python int that differs per step would be baked into the graph);
(d) replay emulated: the ops recorded at the first step of each bucket are re-run as recorded (same ops,
    same Python arguments, the same pool and weight tensors read as they are at replay time, intermediates
    recomputed) at every later step; each replay must equal the eager step exactly, and the engine must give
    the eager engine's tokens and log-probs (an op drawing random numbers would differ there too);
(e) ``torch._dynamo`` traces the step as one graph, without breaks (under dynamo transformers' sdpa repeats
    the key/value heads instead of packing the query's: (a)-(d) check the path a graph records).

``capture_graph`` itself is checked against a fake ``torch.cuda``: warm-ups and capture on one side stream,
the pool's memory pool, ``thread_local`` capture, and the caller's stream current again after a failed capture.

A dynamic-RoPE model is the negative control: its rotary embedding compares ``max(position_ids)`` with a
Python int on the host every step, which (a) catches; ``static_unsupported`` keeps it off the static path.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

import memrl.engines.hf_static as hs
from memrl.engines.hf import HFEngine, cache_keyword
from memrl.engines.hf_batch import left_padded, prefill
from memrl.engines.hf_static import StaticDecoder, bucket, static_unsupported
from memrl.engines.kv_cache import reserved_cache
from tests.engines.test_hf_static import MIXED, PROMPTS, assert_same, both, llama

HOST_READS = {"tolist", "item", "numpy", "__bool__", "__int__", "__float__", "__index__", "__array__", "cpu"}


@dataclass(frozen=True)
class Made:
    """An op argument that an earlier op of the step produced (leaf ``leaf`` of op ``op``'s output)."""
    op: int
    leaf: int


@dataclass(frozen=True)
class Outside:
    """An op argument the step did not produce: read at replay time as it is then (a graph reads its address)."""
    tensor: torch.Tensor


class Tape(TorchDispatchMode):
    """Every aten op of a step, with its tensor arguments as ``Made``/``Outside`` references; ``replay`` re-runs
    them as a CUDA graph would: same ops and Python arguments, outside tensors read as they are now."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[Any, Any, Any]] = []
        self.signature: list[tuple[str, tuple[Any, ...]]] = []
        self.made: dict[int, Made] = {}
        self.keep: list[torch.Tensor] = []  # alive, so that ids stay unique

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)

        def ref(x):
            if not isinstance(x, torch.Tensor):
                return x
            self.keep.append(x)
            return self.made.get(id(x), Outside(x))

        self.ops.append((func, tree_map(ref, args), tree_map(ref, kwargs)))
        self.signature.append((str(func), tuple(
            (tuple(x.shape), x.dtype, tuple(x.stride())) if isinstance(x, torch.Tensor) else x
            for x in tree_leaves((args, kwargs)))))
        for j, t in enumerate(tree_leaves(out)):
            if isinstance(t, torch.Tensor):
                self.keep.append(t)
                self.made[id(t)] = Made(len(self.ops) - 1, j)
        return out

    def outside(self) -> list[torch.Tensor]:
        return [x.tensor for _, args, kwargs in self.ops for x in tree_leaves((args, kwargs)) if isinstance(x, Outside)]

    def replay(self, result: torch.Tensor) -> torch.Tensor:
        """Re-run the ops; the value the recorded ``result`` tensor takes."""
        outs: list[list[Any]] = []

        def get(x):
            if isinstance(x, Made):
                return outs[x.op][x.leaf]
            return x.tensor if isinstance(x, Outside) else x

        for func, args, kwargs in self.ops:
            outs.append(tree_leaves(func(*tree_map(get, args), **tree_map(get, kwargs))))
        where = self.made[id(result)]
        return outs[where.op][where.leaf]


class HostReads(TorchFunctionMode):
    """Tensor methods that hand a value to Python (on a CPU tensor ``tolist``/``numpy`` never reach aten)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in HOST_READS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def lora_llama() -> torch.nn.Module:
    """The tiny Llama with peft LoRA on q/v (B initialised non-zero, so the adapters change the output), eval."""
    from memrl.config.schema import LoraConfig
    from memrl.train.policy import add_lora

    model = add_lora(llama(), LoraConfig(enabled=True, r=4, alpha=8, dropout=0.1, target_modules=["q_proj", "v_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return model.eval()


def dynamic_rope_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(params=["qwen2", "llama-sdpa", "llama-eager", "lora"])
def model(request, tiny_model):
    if request.param == "qwen2":
        return tiny_model[0]
    return lora_llama() if request.param == "lora" else llama(request.param.split("-")[1])


@torch.inference_mode()
def traced_steps(model, steps: int = 3, min_length: int = 16) -> tuple[StaticDecoder, list[tuple[Tape, HostReads]]]:
    """Prefill three prompts and decode ``steps`` tokens through ``StaticDecoder.forward`` as the engine does,
    recording each ``_forward`` (the part a graph captures)."""
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[3]]
    kw = cache_keyword(model)
    ids, att, pos = left_padded(prompts, 0, torch.device("cpu"))
    cache = reserved_cache(ids.shape[1])
    logits = prefill(model, kw, cache, prompts, ids, att, pos)
    dec = StaticDecoder(model, kw, graphs=False, min_length=min_length).start(cache, att, pos[:, -1], ids.shape[1] + 8)
    traces: list[tuple[Tape, HostReads]] = []
    real = dec._forward

    def recorded(b: int) -> torch.Tensor:
        with Tape() as tape, HostReads() as reads:
            out = real(b)
        traces.append((tape, reads))
        return out

    dec._forward = recorded  # type: ignore[method-assign]
    for _ in range(steps):
        logits = dec.forward(logits.argmax(-1).tolist())
    return dec, traces


def syncs(tape: Tape, reads: HostReads) -> list[str]:
    """The host reads and the ops that read a device value on the host or size their output by data."""
    bad = list(reads.calls)
    for (func, _, _), (name, leaves) in zip(tape.ops, tape.signature):
        if func is torch.ops.aten.index.Tensor:  # data-dependent only with a boolean index
            if any(isinstance(x, tuple) and x[1:2] in ((torch.bool,), (torch.uint8,)) for x in leaves[1:]):
                bad.append(f"{name} (a boolean index)")
        elif set(func.tags) & {torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape} or "is_nonzero" in name:
            bad.append(name)
    return bad


def test_a_step_never_reads_the_device_on_the_host(model):
    _, traces = traced_steps(model)
    assert len(traces) == 3
    for tape, reads in traces:
        assert len(tape.ops) > 50  # the dispatch mode did see the model
        assert syncs(tape, reads) == []


def test_a_step_makes_no_tensor_from_python_data(model):
    dec, traces = traced_steps(model)
    pool = dec.pool
    known = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers(), *pool.keys, *pool.values,
                                                      pool.mask, pool.tokens, pool.positions, pool.column)}
    for tape, _ in traces:
        assert not [n for n, _ in tape.signature if "lift" in n]
        strays = [tuple(t.shape) for t in tape.outside() if t.untyped_storage().data_ptr() not in known]
        assert strays == []


def test_consecutive_steps_dispatch_the_same_ops_shapes_and_python_arguments(model):
    dec, traces = traced_steps(model)
    assert dec.col == len(PROMPTS[3]) + 3  # three columns written: the steps did differ in their column
    first = traces[0][0].signature
    for tape, _ in traces[1:]:
        assert len(tape.signature) == len(first)
        assert [i for i, (a, b) in enumerate(zip(first, tape.signature)) if a != b] == []


class EmulatedGraph:
    """``capture_graph``'s contract, by replaying the recorded ops; each replay is checked against the eager step."""

    def __init__(self, step, replays: list[int]) -> None:
        self.step, self.replays = step, replays
        for _ in range(2):  # capture_graph's warm-ups (they rewrite the step's own column)
            step()
        with Tape() as self.tape:
            self.logits = step()

    def replay(self) -> None:
        eager = self.step().clone()  # rewrites the same column with the same keys and values
        self.logits.copy_(self.tape.replay(self.logits))
        torch.testing.assert_close(self.logits, eager, rtol=0, atol=0)
        self.replays.append(1)


def test_replaying_the_recorded_step_gives_the_eager_engines_tokens_and_logprobs(model, monkeypatch):
    """Six requests that finish at different lengths: buckets 8, 4, 2, 1, each recorded once at its first column
    and replayed at every later one; the cache also doubles mid-batch (64 to 128 with two rows live: bucket 2
    recorded again on the new pool)."""
    replays: list[int] = []

    def emulated(step, pool):
        graph = EmulatedGraph(step, replays)
        return graph, graph.logits

    monkeypatch.setattr(hs, "capture_graph", emulated)
    requests = list(zip(PROMPTS, MIXED))
    requests[2] = (PROMPTS[2], MIXED[2].with_(max_new_tokens=30))  # 41 + 29 columns: past 64
    requests[3] = (PROMPTS[3], MIXED[3].with_(max_new_tokens=28))  # with it, bucket 2 from step 20 to 27

    async def go():
        eng = HFEngine(model, decode="static", reserve_new_tokens=4)
        eng._static = StaticDecoder(model, eng.cache_kw, graphs=True, min_length=64)
        out = await asyncio.gather(*(eng.generate(p, s) for p, s in requests))
        await eng.close()
        return out, eng._static

    (eager, _), _ = both(model, requests, reserve_new_tokens=4)
    static, decoder = asyncio.run(go())
    assert decoder.graph_error is None and decoder.captures == 5 and decoder.pool.length == 128  # grew once
    assert len(replays) == max(len(r.token_ids) for r in eager) - 1
    assert_same(eager, static)


def test_the_replay_emulation_sees_new_buffer_values_and_misses_baked_python_values():
    """The emulation itself: an in-place change of a tensor read is seen, a value taken from Python is not."""
    x, k = torch.ones(3), [1.0]

    def step():
        return x * 2 + torch.tensor(k[0])

    with Tape() as tape:
        out = step()
    x.fill_(5.0)
    k[0] = 7.0
    assert tape.replay(out).tolist() == [11.0] * 3 and step().tolist() == [17.0] * 3
    assert [n for n, _ in tape.signature if "lift" in n]


def test_dynamo_traces_the_step_as_one_graph(model):
    dec, _ = traced_steps(model, steps=1)
    del dec._forward  # the real step, unrecorded
    torch._dynamo.reset()
    try:
        with torch.inference_mode():
            explained = torch._dynamo.explain(lambda: dec._forward(bucket(dec.n)))()
    finally:
        torch._dynamo.reset()
    assert [r.reason for r in explained.break_reasons] == [] and explained.graph_count == 1


def test_a_dynamic_rope_model_reads_the_positions_on_the_host_and_stays_off_the_static_path():
    model = dynamic_rope_llama()
    _, traces = traced_steps(model, steps=1)
    assert {"__bool__", "aten.is_nonzero.default"} <= set(syncs(*traces[0]))  # the checks above catch it
    assert "dynamic" in (static_unsupported(model) or "")
    with pytest.raises(ValueError, match="dynamic"):
        HFEngine(model, decode="static")


class FakeCuda:
    """``torch.cuda``'s stream and graph calls as ``capture_graph`` makes them, logged (no GPU here)."""

    def __init__(self, fail: bool) -> None:
        self.log: list[Any] = []
        self.current, self.fail = "caller", fail

    def patch(self, monkeypatch) -> None:
        fake = self

        class Stream:
            def __init__(self):
                self.name = "side"

            def wait_stream(self, other):
                fake.log.append(("wait", self.name, getattr(other, "name", other)))

        class Caller(Stream):
            def __init__(self):
                self.name = "caller"

        @contextlib.contextmanager
        def stream(s):
            before, fake.current = fake.current, s.name
            yield
            fake.current = before

        @contextlib.contextmanager
        def graph(g, pool=None, stream=None, capture_error_mode="global"):
            fake.log.append(("capture", pool, stream.name, capture_error_mode))
            fake.current = stream.name
            yield
            if fake.fail:  # torch.cuda.graph's __exit__: capture_end raises before the stream is restored
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
            fake.current = "caller"

        monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "mempool")
        monkeypatch.setattr(torch.cuda, "current_stream", lambda: Caller())
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(torch.cuda, "graph", graph)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: "graph")
        monkeypatch.setattr(torch.cuda, "set_stream", lambda s: setattr(fake, "current", s.name))


@pytest.mark.parametrize("fail", [False, True])
def test_capture_graph_warms_up_and_captures_on_one_side_stream_and_restores_the_callers(monkeypatch, fail):
    cuda = FakeCuda(fail)
    cuda.patch(monkeypatch)
    pool = hs.Pool.allocate([torch.zeros(1, 2, 4, 8)], rows=1, length=16)
    out = torch.ones(1, 5)

    def step():
        cuda.log.append(("step", cuda.current))
        return out

    if fail:
        with pytest.raises(RuntimeError, match="capturing"):
            hs.capture_graph(step, pool)
    else:
        assert hs.capture_graph(step, pool) == ("graph", out)
    assert cuda.log == [("wait", "side", "caller"), ("step", "side"), ("step", "side"),
                        ("capture", "mempool", "side", "thread_local"), ("step", "side"), ("wait", "caller", "side")]
    assert cuda.current == "caller" and pool.mempool == "mempool"
