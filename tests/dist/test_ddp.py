"""Data-parallel training (gloo, 2 ranks; DDP-style or FSDP2) equals the single-process run on the same data."""

from __future__ import annotations

import json

import pytest
import torch
import torch.multiprocessing as mp

from memrl.dist.ddp import DistContext, free_port, shard_by_tokens
from memrl.models.resolve import load_tokenizer
from memrl.train.trainer import Trainer
from tests.dist.helpers import rank_main
from tests.train.helpers import coin_engine, config


def test_shard_by_tokens_balances_and_covers_every_row():
    lengths = [100, 90, 10, 10, 10, 50, 40, 5]
    shards = shard_by_tokens(lengths, 2)
    assert sorted(i for s in shards for i in s) == list(range(len(lengths)))
    loads = [sum(lengths[i] for i in s) for s in shards]
    assert loads == [155, 160] or loads == [160, 155]
    assert shard_by_tokens(lengths, 2) == shards  # deterministic: every rank computes the same split
    assert shard_by_tokens([5], 3) == [[0], [], []]


def test_single_process_context_is_a_no_op():
    ctx = DistContext()
    assert ctx.main and not ctx.active
    assert ctx.broadcast({"a": 1}) == {"a": 1} and ctx.sum([1.0, 2.0]) == [1.0, 2.0]


def _metrics(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_gloo_ranks_match_one_process(tmp_path, strategy):
    load_tokenizer("tiny")  # build the cached tiny model once, before the ranks race for it
    single = config(tmp_path / "single", trainer__total_steps=3, trainer__mini_batches=2)
    Trainer(single, engine=coin_engine(load_tokenizer("tiny"), seed=5)).run()
    ddp = config(tmp_path / "ddp", trainer__total_steps=3, trainer__mini_batches=2, cluster__trainers=2,
                 cluster__backend="gloo", cluster__strategy=strategy)
    mp.start_processes(rank_main, args=(ddp.model_dump(mode="json"), 2, free_port(), True), nprocs=2,
                       start_method="spawn")
    a, b = _metrics(tmp_path / "single" / "run"), _metrics(tmp_path / "ddp" / "run")
    assert [m["step"] for m in b] == [1, 2, 3]
    for x, y in zip(a, b):
        assert x["reward"] == y["reward"] and x["train_rows"] == y["train_rows"]
        for key in ("pg_loss", "entropy", "grad_norm", "clipfrac"):
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-6), key
    from safetensors.torch import load_file

    files = [next((tmp_path / r / "run/checkpoints/step_000003/model").glob("*.safetensors"))
             for r in ("single", "ddp")]
    wa, wb = load_file(str(files[0])), load_file(str(files[1]))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=1e-4)


def test_a_finished_rank_runs_its_exit_handlers_then_leaves_at_once(tmp_path):
    import subprocess
    import sys

    marker = tmp_path / "handler_ran"
    code = (f"import atexit, pathlib\n"
            f"atexit.register(lambda: pathlib.Path({str(marker)!r}).write_text('yes'))\n"
            f"from memrl.dist.ddp import exit_rank_cleanly\n"
            f"print('before', flush=True)\n"
            f"exit_rank_cleanly()\n"
            f"print('never')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "before\n"
    assert marker.read_text() == "yes"
