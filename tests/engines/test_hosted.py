"""Rollout replicas build their engine through the engine registry (``EngineKind.replica``), never by kind name."""

from __future__ import annotations

import asyncio

import pytest
import torch

from memrl.config import ConfigError, load_config
from memrl.config.registry import ENGINES
from memrl.dist.pool import _Replica
from memrl.engines.base import SamplingParams
from memrl.engines.factory import engine_kind, register_engine
from memrl.engines.hosted import Hosted, HostedHF
from memrl.models.resolve import load_tokenizer
from memrl.testing import ScriptedEngine


def test_the_builtin_kinds_say_how_they_run_in_a_replica():
    assert engine_kind("hf").replica is HostedHF and engine_kind("hf").wraps_policy
    assert engine_kind("vllm").replica is not None and engine_kind("vllm").replica_gpus is not None
    assert engine_kind("openai").replica is None  # a remote server is not loaded into a replica


def test_an_hf_replica_loads_the_start_up_weights_and_generates():
    load_tokenizer("tiny")  # the cached tiny model
    plain = _Replica("tiny", "float32", None, None, 8, 0, kind="hf")
    zeros = {k: torch.zeros_like(v) for k, v in plain.host.model.state_dict().items()}
    replica = _Replica("tiny", "float32", None, zeros, 8, 0, kind="hf")
    assert replica.device == "cpu"
    assert all(torch.count_nonzero(v) == 0 for v in replica.host.model.state_dict().values())
    params = SamplingParams(max_new_tokens=3, temperature=0.0, stop_token_ids=())
    out = asyncio.run(plain.generate([5, 6, 7], params))
    assert len(out.token_ids) == 3


class _Recorded(Hosted):
    """A replica host that records what the replica asked of it."""

    calls: list[str] = []

    def __init__(self, model_path, dtype, device, weights, max_batch_size, seed, options=None):
        self.engine = ScriptedEngine(lambda prompt, params: [9])
        self.device = "cpu"
        self.pending = weights
        _Recorded.calls.append(f"built {model_path} seed={seed} options={sorted(options or {})}")

    async def sleep(self):
        _Recorded.calls.append("sleep")

    async def wake(self):
        _Recorded.calls.append("wake")


def test_a_registered_kind_runs_in_a_replica_through_its_own_builder():
    @register_engine("hosted_test", replica=_Recorded)
    def build(cfg, model=None):
        return ScriptedEngine(lambda prompt, params: [9])

    loaded = []
    _Recorded.calls.clear()
    try:
        replica = _Replica("some/model", "auto", None, {"w": 1}, 8, 3, kind="hosted_test", options={"config": {}})
        replica.engine.update_weights = lambda w: asyncio.sleep(0, loaded.append(w))
        params = SamplingParams(max_new_tokens=1, temperature=0.0, stop_token_ids=())
        asyncio.run(replica.generate([1], params))
        asyncio.run(replica.generate([1], params))
        asyncio.run(replica.sleep())
        asyncio.run(replica.wake())
    finally:
        ENGINES.remove("hosted_test")
    assert loaded == [{"w": 1}]  # the start-up weights, loaded once before the first request
    assert _Recorded.calls == ["built some/model seed=3 options=['config']", "sleep", "wake"]


def test_a_kind_without_a_replica_builder_is_refused_before_ray_starts(tmp_path):
    from memrl.train.setup import build_engine

    cfg = load_config(None, ["engine.kind=openai", "engine.base_url=http://127.0.0.1:9/v1",
                             "cluster.rollout_replicas=2"])
    with pytest.raises(ConfigError, match=r"engine.kind=openai cannot run in a rollout replica; choose hf, vllm"):
        build_engine(cfg, torch.nn.Linear(1, 1), None, resumed=False, device=torch.device("cpu"), pad_id=0,
                     sharded=False, trainer_ranks=1)
    with pytest.raises(ValueError, match="engine.kind=openai cannot run in a rollout replica"):
        _Replica("tiny", "auto", None, None, 8, 0, kind="openai")
