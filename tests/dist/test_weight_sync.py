"""Collective weight sync: bucketing, and a gloo broadcast from the trainer to Ray replicas that survives a death."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import torch

from memrl.config import ConfigError
from memrl.dist.weight_sync import buckets, layout_of
from tests.train.helpers import config


def test_buckets_keep_dtype_runs_and_size_limit():
    state = {"a": torch.zeros(10), "b": torch.zeros(10), "c": torch.zeros(30), "d": torch.zeros(4, dtype=torch.int64),
             "e": torch.zeros(5)}
    layout = layout_of(state)
    assert layout[3] == ("d", (4,), "int64")
    assert buckets(layout, 80) == [[0, 1], [2], [3], [4]]  # 40+40 B fit; 120 B alone; a dtype change cuts
    assert buckets(layout, 10**6) == [[0, 1, 2], [3], [4]]
    assert sorted(i for b in buckets(layout, 1) for i in b) == list(range(5))  # tiny limit: one each


def test_collective_sync_on_shared_gpu_is_refused(tmp_path):
    from memrl.train.trainer import check_config

    cfg = config(tmp_path, cluster__rollout_replicas=2, cluster__replica_gpus=0.5, cluster__weight_sync="collective")
    with pytest.raises(ConfigError, match="one rank per GPU"):
        check_config(cfg)


@pytest.mark.timeout(600)
def test_gloo_broadcast_reaches_every_replica_and_a_replacement(tmp_path):
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    from memrl.dist.pool import RayEnginePool
    from memrl.engines.base import SamplingParams
    from memrl.engines.hf import HFEngine
    from memrl.models.resolve import load_model

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        pool = RayEnginePool("tiny", 2, num_cpus=1, weight_sync="collective", bucket_mb=0.01)
        model = load_model("tiny", device="cpu")
        params = SamplingParams(max_new_tokens=8, greedy=True)
        before = asyncio.run(HFEngine(model, pad_token_id=0).generate([5, 6, 7], params)).token_ids

        def perturb(seed):
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * 0.5)
            return asyncio.run(HFEngine(model, pad_token_id=0).generate([5, 6, 7], params)).token_ids

        def served():
            return [ray.get(a.generate.remote([5, 6, 7], params)).token_ids for a in pool.actors]

        want = perturb(1)
        assert want != before  # the new weights change what the model says
        asyncio.run(pool.update_weights(model.state_dict()))
        assert served() == [want, want] and pool.last_sync_s > 0

        os.kill(ray.get(pool.actors[0].pid.remote()), signal.SIGKILL)  # dies between syncs
        out = asyncio.run(pool.generate([5, 6, 7], params))  # routed to replica 0, which is dead: replaced
        asyncio.run(pool.generate([5, 6, 7], params))
        assert pool.restarts == 1
        assert out.token_ids == want  # the replacement started from the last synced weights
        want2 = perturb(2)
        asyncio.run(pool.update_weights(model.state_dict()))  # the group is formed anew with the replacement
        assert served() == [want2, want2]
        asyncio.run(pool.close())
    finally:
        ray.shutdown()


def test_vllm_replica_without_vllm_says_how_to_get_it():
    pytest.importorskip("ray", reason="the ray extra is not installed")
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here")
    from memrl.dist.pool import _Replica

    with pytest.raises(ImportError, match=r"memrl\[vllm\]"):
        _Replica("tiny", "auto", None, None, 8, 0, kind="vllm", options={"config": {"engine": {"kind": "vllm", "tensor_parallel_size": 2}}})


class _FakePool:
    """The replica pool's reporting surface: what WeightSync reads after a push."""

    weight_sync = "collective"

    def __init__(self) -> None:
        self.last_sync_s = 0.0

    async def update_weights(self, state_dict):
        self.last_sync_s = 0.5

    def stats(self):
        return {"replicas": 2.0}


def test_replica_pool_sync_reports_its_path_and_speed(tmp_path):
    from memrl.train.engine_sync import SYNC_PATH_CODES, WeightSync

    cfg = config(tmp_path, cluster__rollout_replicas=2, cluster__weight_sync="collective")
    pool = _FakePool()
    sync = WeightSync(cfg, pool, pool, policy=None, push=True, sharded=False, main=True)
    weights = {"a": torch.zeros(250_000), "b": torch.zeros(500_000, dtype=torch.bfloat16)}  # 2 MB
    asyncio.run(sync.push_weights(weights))
    stats = sync.engine_stats()
    assert stats["sync/path"] == SYNC_PATH_CODES["collective"] and stats["replicas"] == 2.0
    assert stats["sync/gb_per_s"] == pytest.approx(2e6 / 1e9 / 0.5) and stats["sync_mb"] == pytest.approx(2e6 / 2**20)
    assert "sync/path" not in sync.engine_stats()  # reported once, for the push that happened
