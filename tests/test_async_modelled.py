"""bench/async_modelled.py's parts: the latency model, the engine in a process of its own, the summary's ratios."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import async_modelled  # noqa: E402
from engine_process import ProcessEngine  # noqa: E402
from modelled_engine import ModelledLatencyEngine  # noqa: E402

from memrl.engines.base import GenerationResult, SamplingParams  # noqa: E402


class Instant:
    """An engine that answers at once with ``n`` tokens counting up from the prompt's length."""

    def __init__(self, n: int) -> None:
        self.n, self.weights = n, 0

    async def generate(self, prompt_ids, params):
        start = len(prompt_ids)
        return GenerationResult(list(range(start, start + self.n)), [0.0] * self.n, "length")

    async def update_weights(self, state_dict):
        self.weights += 1


def test_a_request_takes_a_plus_b_per_token_and_a_continuation_skips_the_prefill():
    inner = Instant(3)
    eng = ModelledLatencyEngine(inner, a=0.05, b=0.01)

    async def go():
        t0 = time.perf_counter()
        first = await eng.generate([1, 2], SamplingParams(max_new_tokens=3))
        took = time.perf_counter() - t0
        cont = eng.latency([1, 2, *first.token_ids], [9, 9, 9])  # the next piece of the same request
        fresh = eng.latency([1, 2], [9, 9, 9])  # a new request with a prompt seen as a prompt only
        await eng.update_weights({})
        after = eng.latency([1, 2, 9, 9, 9], [7])  # cached under the old weights: the prefill is paid again
        return took, cont, fresh, after

    took, cont, fresh, after = asyncio.run(go())
    assert 0.08 - 0.005 <= took < 0.08 + 0.2  # a + 3 b = 0.08 s (sleeping; the inner engine took nothing)
    assert cont == pytest.approx(0.03)  # 3 b, no a
    assert fresh == pytest.approx(0.08)
    assert after == pytest.approx(0.06)
    assert inner.weights == 1  # the update went through to the real engine
    assert eng.busy_s == pytest.approx(0.08) and eng.overrun_s == 0.0


def test_an_interrupt_returns_the_tokens_the_modelled_decode_has_produced_so_far():
    eng = ModelledLatencyEngine(Instant(10), a=0.05, b=0.02)  # a 10-token request takes 0.25 s

    async def go():
        task = asyncio.ensure_future(eng.generate([1, 2], SamplingParams(max_new_tokens=10)))
        await asyncio.sleep(0.05 + 0.02 * 4 + 0.01)  # prefill, then 4 tokens and a half
        t0 = time.perf_counter()
        eng.interrupt()
        res = await task
        return res, time.perf_counter() - t0

    res, waited = asyncio.run(go())
    assert res.finish_reason == "abort" and waited < 0.02
    assert 3 <= len(res.token_ids) <= 5 and res.token_ids == list(range(2, 2 + len(res.token_ids)))
    assert len(res.logprobs) == len(res.token_ids) and eng.inflight == set()
    done = asyncio.run(eng.generate([1, 2], SamplingParams(max_new_tokens=10)))  # no interrupt: all of it
    assert done.finish_reason == "length" and len(done.token_ids) == 10


def test_engine_process_generates_what_the_in_process_engine_does_and_takes_new_weights():
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model

    model = load_model("tiny", device="cpu")  # the child loads the same alias
    model.eval()
    local = HFEngine(model, pad_token_id=0, max_batch_size=8, seed=0)
    params = [SamplingParams(max_new_tokens=5, temperature=1.0, seed=s) for s in range(3)]
    prompt = [5, 6, 7, 8]
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}

    async def go(eng):
        before = [await eng.generate(prompt, p) for p in params]
        await eng.update_weights(new)
        after = [await eng.generate(prompt, p) for p in params]
        return [r.token_ids for r in before], [r.token_ids for r in after]

    remote = ProcessEngine("tiny", max_batch_size=8, seed=0, core=None)
    try:
        got = asyncio.run(go(remote))
    finally:
        asyncio.run(remote.close())
    want = asyncio.run(go(local))
    assert got == want
    assert got[0] != got[1]  # the new weights changed what is generated
    assert not remote.proc.is_alive()


def test_summary_ratios_are_per_seed_against_that_seeds_sync_run(capsys):
    def run(seed, eta, tok_s, steady):
        return {"spec": {"seed": seed, "eta": eta}, "label": "sync" if eta is None else f"η={eta}",
                "tok_s": tok_s, "steady_tok_s": steady, "rewards": [0.1, 0.2, 0.3], "rollout_s": 3.0,
                "update_s": 6.0, "sync_s": 0.3, "wall_s": 9.0, "stale": {}, "idle": None, "engine": "process",
                "pinned": True}

    results = [run(0, None, 100.0, 100.0), run(0, 1, 160.0, 180.0), run(1, None, 200.0, 200.0),
               run(1, 1, 300.0, 340.0), run(2, None, 50.0, 50.0), run(2, 1, 85.0, 95.0)]
    assert async_modelled._ratios(results) == {1: {0: 1.6, 1: 1.5, 2: 1.7}}
    assert async_modelled._ratios(results, "steady_tok_s") == {1: {0: 1.8, 1: 1.7, 2: 1.9}}
    async_modelled.print_summary(results)
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| η=1"))
    assert "| 1.50x | 1.60x | 1.70x | 1.80x |" in row  # min and median over the three seeds: whole run, steady
    assert "| 1.00 | 2.00 | 0.10 | 0.300 ± 0.000 |" in row  # per step: 9 s waiting, 18 s update, 0.9 s sync in 9 steps


def test_steady_state_throughput_leaves_the_first_step_out():
    from async_vs_sync import summarise

    rows = [{"train_tokens": 100.0, "time/step": 5.0}, {"train_tokens": 300.0, "time/step": 1.0},
            {"train_tokens": 100.0, "time/step": 1.0}]
    out = summarise(rows, wall=8.0)
    assert out["tok_s"] == 500 / 8.0 and out["steady_tok_s"] == 400 / 2.0
    assert "steady_tok_s" not in summarise([{"train_tokens": 100.0}, {"train_tokens": 100.0}], wall=1.0)


def test_balance_puts_b_where_the_line_through_two_probes_meets_the_update():
    # wait = 0.4 s fixed + 20 s per (s/token): probes at b = 0.06 (1.6 s) and 0.02 (0.8 s); update 0.6 s -> b = 0.01
    assert async_modelled.solve_b(0.06, 1.6, 0.02, 0.8, 0.6) == pytest.approx(0.01)
    assert async_modelled.solve_b(0.06, 1.6, 0.02, 0.8, 0.3) == 1e-3  # below the fixed part: the smallest b
    assert async_modelled.solve_b(0.06, 1.0, 0.02, 1.0, 0.5) == 0.02  # no slope to follow: the second probe
