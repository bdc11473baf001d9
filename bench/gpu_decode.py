"""``bench/gpu_check.py``'s decode sections: the HF engine's decode paths (``engine.decode``) on one model.

``decode``: eager (growing cache, a kernel launch per op) and static (preallocated cache, a CUDA graph per
batch-size bucket). ``compiled``: the static step compiled by ``torch.compile`` beside eager and static in
the same process, with the time compiling took. Each gives tokens/s at 1 and 64 in flight with its % of the
bandwidth bound, the greedy agreement with eager, and where a step's time goes.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import torch

from gpu_sections import Row, _tokens_per_s, copy_bandwidth, decode_bound, model_dir
from real_shapes import param_count

DECODE_CONCURRENCY = (1, 64)


async def _greedy(engine: Any, prompts: list[list[int]], new: int) -> list[Any]:
    from memrl.engines.base import SamplingParams

    params = SamplingParams(max_new_tokens=new, temperature=0.0, seed=0, stop_token_ids=())
    return list(await asyncio.gather(*(engine.generate(ids, params) for ids in prompts)))


def agreement(eager: list[Any], other: list[Any], name: str = "static") -> Row:
    """Greedy answers of two paths on the same prompts: leading tokens equal, and the largest log-prob gap
    over those (on a GPU the kernels differ, so a near tie can flip a token: then the rest differs too)."""
    same = total = 0
    gap = 0.0
    for a, b in zip(eager, other):
        k = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y),
                 min(len(a.token_ids), len(b.token_ids)))
        same, total = same + k, total + len(a.token_ids)
        gap = max([gap, *(abs(x - y) for x, y in zip(a.logprobs[:k], b.logprobs[:k]))])
    return {"check": f"{name} = eager (greedy)", "setting": f"{len(eager)} prompts at once",
            "result": f"{same}/{total} tokens equal before the first difference; largest log-prob difference {gap:.1e}"}


class _Bench:
    """One model, its bandwidth bound, the prompts; measures a decode mode and keeps its rates for ratios."""

    def __init__(self, shape: str, device: str, dtype: str, prompt: int, new: int) -> None:
        from memrl.models.resolve import load_model

        self.shape, self.dtype, self.device, self.prompt, self.new = shape, dtype, device, prompt, new
        self.weight_bytes = param_count(shape) * torch.empty((), dtype=getattr(torch, dtype)).element_size()
        self.bandwidth = copy_bandwidth(device, 2**30 if device.startswith("cuda") else 2**26)
        self.model = load_model(str(model_dir(shape, dtype)), dtype=dtype, device=device)
        self.rates: dict[tuple[str, int], float] = {}
        self.splits: dict[tuple[str, int], Row] = {}
        self.greedy: dict[str, list[Any]] = {}
        # mixed lengths: the greedy comparison's 8 prompts
        self.prompts = [[(11 * i + 3 * j) % 400 + 10 for j in range(prompt // (i + 1))] for i in range(8)]

    def bandwidth_row(self) -> Row:
        return {"check": "copy bandwidth", "setting": self.device, "result": f"{self.bandwidth / 1e9:.0f} GB/s"}

    def measure(self, mode: str, versus: tuple[str, ...] = (), rates: bool = True) -> tuple[Any, list[Row]]:
        """The engine of ``mode`` (kept for the caller's diagnostics) and its rows; ``versus``: modes measured
        before whose rates it is compared to; ``rates=False``: only the greedy answers. A static path's step
        split is timed right after each rate, while that concurrency's graph is current (the 64-row pool
        replaces the one holding the 1-row graph)."""
        from memrl.engines.hf import HFEngine

        engine = HFEngine(self.model, decode=mode, max_batch_size=max(DECODE_CONCURRENCY))
        self.greedy[mode] = asyncio.run(_greedy(engine, self.prompts, min(self.new, 64)))
        say(f"{mode}: greedy answers done")
        rows: list[Row] = []
        for c in DECODE_CONCURRENCY if rates else ():
            asyncio.run(_tokens_per_s(engine, c, c, self.prompt, 4))  # warm-up; static: captures this bucket's graph
            rate = self.rates[mode, c] = asyncio.run(_tokens_per_s(engine, c, max(c, 2), self.prompt, self.new))
            say(f"{mode}: {c} in flight, {rate:.0f} tok/s")
            bound = decode_bound(c, self.weight_bytes, self.bandwidth)
            ratios = "".join(f", {rate / self.rates[v, c]:.1f}x {v}" for v in versus if (v, c) in self.rates)
            rows.append({"check": "decode tokens/s", "setting": f"HF {mode}, {c} in flight, {self.shape} {self.dtype}, "
                         f"prompt {self.prompt} + {self.new} new",
                         "result": f"{rate:.0f} tok/s = {100 * rate / bound:.1f}% of the bound {bound:.0f}{ratios}"})
            if mode != "eager":
                self.splits[mode, c] = self._split(engine, mode, c)
        return engine, rows

    def _split(self, engine: Any, mode: str, c: int) -> Row:
        try:  # a diagnostic: its failure must not cost the section's measured rows
            return step_split(engine._static, self.model, c, self.rates[mode, c], self.device, mode)
        except Exception as exc:  # noqa: BLE001
            return {"check": f"{mode} decode step", "setting": f"{c} in flight",
                    "result": f"FAILED: {type(exc).__name__}: {exc}"[:300]}

    def diagnostics(self, engine: Any, mode: str) -> list[Row]:
        """Graph captures, greedy agreement with eager, and the step split at each concurrency."""
        static = engine._static
        graphs = ("no decoder" if static is None else f"CUDA graphs: {static.captures} captured" if static.graphs
                  else f"no CUDA graphs ({static.graph_error or 'not on a GPU'})")
        rows = [{"check": f"{mode} decode", "setting": f"{self.shape} {self.dtype}", "result": graphs},
                agreement(self.greedy["eager"], self.greedy[mode], mode)]
        return rows + [self.splits[mode, c] for c in DECODE_CONCURRENCY if (mode, c) in self.splits]


def say(line: str) -> None:
    """A progress line (gpu_check passes it on as it comes: a section stopped at its time limit shows how far
    it got)."""
    print(f"gpu_decode: {line}", flush=True)


def _free() -> None:
    gc.collect()  # the engine's worker tasks keep it in a reference cycle: its cache pools go only now
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def decode(shape: str, device: str, dtype: str, prompt: int = 512, new: int = 128, smoke: bool = False) -> list[Row]:
    """Eager and static decode of one model: tokens/s at 1 and 64 in flight, each with its % of the bandwidth
    bound (``smoke``: 64-token prompts, 16 new tokens)."""
    if smoke:
        prompt, new = 64, 16
    bench = _Bench(shape, device, dtype, prompt, new)
    rows = [bench.bandwidth_row()]
    for mode in ("eager", "static"):
        engine, got = bench.measure(mode, versus=("eager",) if mode == "static" else ())
        rows += got
        if mode == "static":
            rows += bench.diagnostics(engine, mode)
        del engine
        _free()  # the eager engine's memory goes before the static one's pools are allocated
    return rows


def compiled(shape: str, device: str, dtype: str, prompt: int = 512, new: int = 128, smoke: bool = False) -> list[Row]:
    """``engine.decode=compiled`` beside static in one process: tokens/s at 1 and 64 in flight with the ratio,
    how long compiling took, greedy agreement with eager, the step split (eager's rates are the decode
    section's: only its greedy answers are decoded here; the static rates the ratio uses are in the
    compile row)."""
    if smoke:
        prompt, new = 64, 16
    bench = _Bench(shape, device, dtype, prompt, new)
    for mode in ("eager", "static"):
        engine, _ = bench.measure(mode, rates=mode == "static")  # static's rows are the decode section's
        del engine
        _free()
    t0 = time.perf_counter()
    engine, rows = bench.measure("compiled", versus=("static",))
    step = engine._static.step if engine._static is not None else None
    error = getattr(step, "error", None)
    state = (f"FAILED: {error}" if error else
             f"compiling took {getattr(step, 'seconds', 0.0):.0f} s, {getattr(step, 'graphs', 0)} graphs")
    static = " / ".join(f"{bench.rates['static', c]:.0f}" for c in DECODE_CONCURRENCY)
    rows.append({"check": "torch.compile of the step", "setting": f"torch {torch.__version__}, inductor",
                 "result": f"{state} (the whole mode {time.perf_counter() - t0:.0f} s); static in this process: "
                           f"{static} tok/s at {' / '.join(map(str, DECODE_CONCURRENCY))} in flight"})
    return rows + bench.diagnostics(engine, "compiled")


def step_split(static: Any, model: Any, c: int, rate: float, device: str, mode: str = "static") -> Row:
    """Where a static decode step's time goes at ``c`` in flight: the whole step (from the measured rate, prompt
    included), the CUDA graph's replay alone and token selection alone, each timed over 50 repeats; the rest
    is the host's own work between them. Says what to speed up next when the goal is missed."""
    from memrl.engines.base import SamplingParams
    from memrl.engines.hf_static import bucket
    from memrl.engines.sampling import select_tokens

    graph = next((p.graphs[bucket(c)][0] for p in (static.pools if static else []) if bucket(c) in p.graphs), None)
    if graph is None or not device.startswith("cuda"):
        return {"check": f"{mode} decode step", "setting": f"{c} in flight", "result": "no CUDA graph to time"}

    def per_call_ms(fn: Any) -> float:
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / 50 * 1e3

    replay = per_call_ms(graph.replay)
    logits = torch.randn(c, model.config.vocab_size, device=next(model.parameters()).device, dtype=model.dtype)
    params = [SamplingParams(temperature=1.0, seed=0)] * c
    gens = [torch.Generator().manual_seed(i) for i in range(c)]
    select = per_call_ms(lambda: select_tokens(logits, params, gens))
    step = 1e3 * c / rate
    return {"check": f"{mode} decode step", "setting": f"{c} in flight, sampled at temperature 1",
            "result": f"{step:.2f} ms a step: graph replay {replay:.2f} ms, token selection {select:.2f} ms, the "
                      f"rest {max(step - replay - select, 0.0):.2f} ms (host bookkeeping, the prompt's prefill)"}
