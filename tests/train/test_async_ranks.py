"""Asynchronous training with several trainer ranks: rank 0 runs the producer, every rank updates its shard."""

from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp

from memrl.dist.ddp import free_port
from memrl.models.resolve import load_tokenizer
from memrl.train.trainer import Trainer
from tests.dist.helpers import rank_main
from tests.train.helpers import coin_engine, config


def _metrics(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_gloo_ranks_of_async_at_zero_staleness_match_one_process(tmp_path, strategy):
    load_tokenizer("tiny")  # build the cached tiny model once, before the ranks race for it
    over = {"trainer__mode": "async", "trainer__max_staleness": 0, "trainer__total_steps": 3,
            "trainer__mini_batches": 2, "algorithm__off_policy": "decoupled"}
    single = config(tmp_path / "single", **over)
    Trainer(single, engine=coin_engine(load_tokenizer("tiny"), seed=5)).run()
    ranks = config(tmp_path / "ranks", cluster__trainers=2, cluster__backend="gloo", cluster__strategy=strategy,
                   **over)
    mp.start_processes(rank_main, args=(ranks.model_dump(mode="json"), 2, free_port(), True), nprocs=2,
                       start_method="spawn")
    a, b = _metrics(tmp_path / "single" / "run"), _metrics(tmp_path / "ranks" / "run")
    assert [m["step"] for m in b] == [1, 2, 3]
    for x, y in zip(a, b):
        assert x["reward"] == y["reward"] and x["train_rows"] == y["train_rows"]
        assert y["async/staleness_0"] == y["rollout_episodes"] == 8
        for key in ("pg_loss", "entropy", "grad_norm", "clipfrac", "is_weight_mean"):
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), key
    from safetensors.torch import load_file

    files = [next((tmp_path / r / "run/checkpoints/step_000003/model").glob("*.safetensors"))
             for r in ("single", "ranks")]
    wa, wb = load_file(str(files[0])), load_file(str(files[1]))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=1e-4)
