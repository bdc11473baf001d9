"""Rollout replicas on a local Ray cluster (CPU): routing, weight sync, surviving a killed replica."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from memrl.dist.ddp import free_port  # noqa: E402
from memrl.models.resolve import load_tokenizer  # noqa: E402
from memrl.train.trainer import Trainer  # noqa: E402
from tests.dist.helpers import rank_main  # noqa: E402
from tests.train.helpers import config  # noqa: E402


@pytest.fixture
def local_ray():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sync", ["object_store", "collective"])
def test_killing_a_replica_mid_step_does_not_fail_the_run(tmp_path, local_ray, sync):
    cfg = config(tmp_path, trainer__total_steps=2, cluster__rollout_replicas=2, cluster__replica_cpus=1.0,
                 cluster__weight_sync=sync)
    trainer = Trainer(cfg)
    pool = trainer.pool
    assert "ray cluster: 1 node(s), 4 CPU" in trainer.status_line and "2 rollout replica(s)" in trainer.status_line
    victim = ray.get(pool.actors[0].pid.remote())
    real = pool.generate
    calls = {"n": 0}

    async def generate(prompt_ids, params):
        calls["n"] += 1
        if calls["n"] == 6:  # mid-rollout of step 1, with requests in flight on both replicas
            os.kill(victim, signal.SIGKILL)
        return await real(prompt_ids, params)

    pool.generate = generate  # type: ignore[method-assign]
    trainer.run()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert lines[-1]["replica_restarts"] >= 1 and lines[-1]["failed_episodes"] == 0
    assert lines[0]["rollout_episodes"] == 8
    assert lines[-1]["replica0_requests"] > 0 and lines[-1]["replica1_requests"] > 0
    assert all(m["time/sync"] > 0 for m in lines)  # the new weights were pushed to the replicas
    # the replacement replica serves the trained weights: greedy output equals the policy's own
    from memrl.engines.base import SamplingParams
    from memrl.engines.hf import HFEngine
    import asyncio

    params = SamplingParams(max_new_tokens=8, greedy=True)
    local = HFEngine(trainer.policy, pad_token_id=trainer.pad_id)
    want = asyncio.run(local.generate([5, 6, 7], params)).token_ids
    got = [ray.get(a.generate.remote([5, 6, 7], params)).token_ids for a in pool.actors]
    assert got == [want, want]


@pytest.mark.timeout(600)
def test_two_replicas_and_two_gloo_ranks_match_one_process(tmp_path):
    """Same seed: replicas sample what the in-process engine samples, and 2 ranks update as 1 process does."""
    load_tokenizer("tiny")
    # a hashed-text reward: the tiny model never answers, so with "em" every reward is 0 and only the entropy
    # bonus trains (advantages and the policy-gradient path untested)
    kw = dict(trainer__total_steps=3, trainer__mini_batches=2, algorithm__entropy_coef=0.05, trainer__lr=1e-2,
              workflow__reward="tests.train.helpers:text_reward")
    Trainer(config(tmp_path / "single", **kw)).run()
    cfg = config(tmp_path / "dist", cluster__rollout_replicas=2, cluster__replica_cpus=0.5, cluster__trainers=2,
                 cluster__backend="gloo", **kw)
    mp.start_processes(rank_main, args=(cfg.model_dump(mode="json"), 2, free_port(), False), nprocs=2,
                       start_method="spawn")
    a, b = ([json.loads(x) for x in (tmp_path / r / "run" / "metrics.jsonl").read_text().splitlines()]
            for r in ("single", "dist"))
    assert [m["step"] for m in b] == [1, 2, 3]
    assert b[-1]["replicas"] == 2 and b[0]["rollout_episodes"] == 8
    assert b[-1]["replica0_requests"] > 0 and b[-1]["replica1_requests"] > 0
    for x, y in zip(a, b):
        for key in ("reward", "response_tokens", "memory_truncated", "train_rows"):  # the same episodes
            assert y[key] == x[key], (x["step"], key)
        for key in ("entropy", "pg_loss", "grad_norm"):
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), (x["step"], key)
    # the same sampled tokens at every step (the metrics above are blind to them: a random model's responses all
    # run to the token limit); a replica serving stale weights or a reordered seed shows here
    def tokens(r: str, step: int) -> list:
        path = tmp_path / r / "run" / "rollouts" / f"step_{step:06d}.jsonl"
        return sorted((e["group_id"], [c["token_ids"] for c in e["conversations"]])
                      for e in map(json.loads, path.read_text().splitlines()))

    for step in (1, 2, 3):
        assert tokens("dist", step) == tokens("single", step), step
    from safetensors.torch import load_file

    from memrl.models.resolve import resolve_model_path

    w0, wa, wb = (load_file(str(next(p.glob("*.safetensors")))) for p in (
        Path(resolve_model_path("tiny")), *(tmp_path / r / "run/checkpoints/step_000003/model" for r in ("single", "dist"))))
    # Not element-wise: Adam's step lr*m/(sqrt(v)+eps) has gain ~lr/eps = 1e6 on coordinates whose gradient is
    # below eps=1e-8, so float32 summation-order noise (1e-12 absolute, 2 ranks' partial sums vs one pass) moves
    # those few weights by up to ~1e-2*lr. The update as a whole agrees to ~2e-5; a dropped or doubled row, or one
    # different sampled token, moves it by >= 7e-4.
    diff = torch.cat([(wb[k] - wa[k]).flatten() for k in w0])
    update = torch.cat([(wa[k] - w0[k]).flatten() for k in w0])
    assert float(diff.norm() / update.norm()) < 1e-4
