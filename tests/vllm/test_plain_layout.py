"""vLLM's CPU build in plain layout (``engine.vllm.cpu_layout=plain``): the same model served, syncs written in place."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

import torch  # noqa: E402

from memrl.config import load_config  # noqa: E402
from memrl.engines.hf import HFEngine  # noqa: E402
from memrl.engines.vllm import VLLMEngine  # noqa: E402
from memrl.engines.vllm_args import on_cpu  # noqa: E402
from tests.vllm.conftest import VLLM_OVERRIDES  # noqa: E402
from tests.vllm.test_engine import assert_same, base_model, greedy, perturbed  # noqa: E402

pytestmark = pytest.mark.skipif(not on_cpu(), reason="plain layout is for vLLM's CPU build")


@pytest.fixture(scope="module")
def plain():
    eng = VLLMEngine.from_config(load_config(None, [*VLLM_OVERRIDES, "engine.vllm.cpu_layout=plain"]))
    yield eng
    eng.shutdown()


def sync(eng: VLLMEngine, state: dict[str, torch.Tensor], path: str = "shm") -> list:
    eng.sync_path = path
    asyncio.run(eng.update_weights(state))
    assert eng.last_sync_path == path
    return asyncio.run(greedy(eng))


def test_plain_layout_serves_the_checkpoint(plain):
    assert plain.direct_loads and not plain.in_place  # every load is final; nothing shared before a sync
    assert_same(asyncio.run(greedy(plain)), asyncio.run(greedy(HFEngine(base_model()))))


def test_in_place_syncs_serve_each_new_state_as_a_bytes_sync_does(plain):
    base = base_model().state_dict()
    try:
        served = []
        for seed in (1, 2):
            model = base_model()
            state = perturbed(model, seed=seed)
            model.load_state_dict(state)
            got = sync(plain, state)
            assert plain.in_place and plain.last_sync["sync_mb"] > 1
            assert_same(got, asyncio.run(greedy(HFEngine(model))))
            sync(plain, base, "bytes")  # vLLM's own reload into the shared parameters, from another state
            assert_same(sync(plain, state, "bytes"), got, tol=1e-5)  # batch timing moves float32 sums by ~1e-7
            served.append(got)
        assert [r.logprobs for r in served[0]] != [r.logprobs for r in served[1]]  # the weights are live
    finally:
        sync(plain, base)
    assert_same(asyncio.run(greedy(plain)), asyncio.run(greedy(HFEngine(base_model()))))


def test_a_state_of_another_layout_goes_through_the_buckets(plain):
    base = base_model().state_dict()
    sync(plain, base)
    name = "model.layers.0.self_attn.q_proj.weight"
    model = base_model()
    part = {name: perturbed(model, scale=0.5, seed=4)[name]}
    model.load_state_dict(part, strict=False)
    try:
        got = sync(plain, part)  # one tensor: not the layout planned for, loaded by vLLM's loaders instead
        assert plain.last_sync["sync_mb"] < 1
        assert_same(got, asyncio.run(greedy(HFEngine(model))))
    finally:
        sync(plain, base)
