"""vLLM engines as Ray rollout replicas on a CPU machine: training reaches every replica's weights."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")
ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from memrl.config import MemRLConfig  # noqa: E402
from memrl.engines.base import SamplingParams  # noqa: E402
from memrl.engines.hf import HFEngine  # noqa: E402
from memrl.models.resolve import load_model  # noqa: E402
from memrl.train.engine_sync import SYNC_PATH_CODES  # noqa: E402
from memrl.train.policy import merged_state_dict  # noqa: E402
from memrl.train.trainer import Trainer  # noqa: E402
from tests.vllm.helpers import train_config  # noqa: E402


@pytest.mark.timeout(900)
def test_two_vllm_replicas_on_cpu_serve_the_trained_weights(tmp_path):
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        cfg = MemRLConfig.model_validate(train_config(tmp_path, 2, cluster__rollout_replicas=2,
                                                      cluster__replica_cpus=1.0))
        trainer = Trainer(cfg)
        trainer.run()
        pool = trainer.pool
        model = load_model("tiny32", "float32", "cpu")
        model.load_state_dict(merged_state_dict(trainer.policy))
        params = SamplingParams(max_new_tokens=8, greedy=True)
        want = asyncio.run(HFEngine(model).generate([5, 6, 7, 8], params))
        for actor in pool.actors:
            got = ray.get(actor.generate.remote([5, 6, 7, 8], params))
            assert got.token_ids == want.token_ids
            assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs)) < 1e-4
        stats = pool.stats()
        assert stats["replica0_requests"] > 0 and stats["replica1_requests"] > 0
        rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
        synced = [r for r in rows if "sync/path" in r]
        assert len(synced) == 2 and all(r["sync/path"] == SYNC_PATH_CODES["object_store"] for r in synced)
        assert all(r["sync/gb_per_s"] > 0 for r in synced)
    finally:
        ray.shutdown()
