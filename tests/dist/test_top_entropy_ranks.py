"""``algorithm.top_entropy_quantile`` in a 2-rank gloo run: the threshold over both ranks' tokens (TRL's gather)
makes the run the single process's on the same data; ranks whose micro-batch counts differ run as many passes
(the threshold is a collective), so the run does not hang."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.multiprocessing as mp

from memrl.dist.ddp import free_port
from memrl.models.resolve import load_tokenizer
from memrl.train.trainer import Trainer
from tests.dist.helpers import rank_main
from tests.train.helpers import coin_engine, config

# the entropy bonus on from the second step (adaptive control, a target above any entropy here): its coefficient
# and the kept tokens' entropies it reads are compared too
OVER = {"trainer__total_steps": 2, "trainer__mini_batches": 2, "algorithm__top_entropy_quantile": 0.2,
        "algorithm__adaptive_entropy": True, "algorithm__entropy_coef": 0.05, "algorithm__entropy_target": 100.0}


def _metrics(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _recording(path: str) -> None:
    """Record every threshold pool (the entropies the quantile is taken over, sorted) and the caller's own token
    count, one JSON line per call, by wrapping the objective's gather."""
    import memrl.rl.objective as objective

    gather = objective.all_ranks

    def record(values: torch.Tensor, contribute: bool = True) -> torch.Tensor:
        pool = gather(values, contribute)
        line = {"own": values.numel() if contribute else 0, "pool": pool.sort().values.tolist()}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
        return pool

    objective.all_ranks = record


def _recorded_rank(rank: int, raw: dict, world: int, port: int, out: str) -> None:
    _recording(f"{out}/{rank}.jsonl")
    rank_main(rank, raw, world, port, True)


def _counted_rank(rank: int, raw: dict, world: int, port: int, out: str) -> None:
    """As _recorded_rank, and one line per training forward pass (the update's passes ask for the entropy)."""
    import memrl.train.update as update

    forward = update.token_logprobs

    def count(*a, **kw):
        if kw.get("with_entropy"):
            with open(f"{out}/{rank}.forward", "a") as f:
                f.write("1\n")
        return forward(*a, **kw)

    update.token_logprobs = count
    _recorded_rank(rank, raw, world, port, out)


def _pools(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_gloo_ranks_take_the_threshold_over_the_tokens_one_process_has(tmp_path, strategy):
    """One micro-batch per rank and mini-batch: every threshold's pool is the same on both ranks, holds both
    ranks' tokens, and is the single process's micro-batch (each rank's own quantile took half of them); the first
    step's loss and gradient are the single process's. Not the second's: this tiny model's entropies lie within
    0.003 of each other, tied between identical responses, and move by up to 5e-7 with the batch's shape, and in
    its second mini-batch a tie at the threshold falls on either side of it."""
    load_tokenizer("tiny")  # build the cached tiny model once, before the ranks race for it
    import memrl.rl.objective as objective
    import memrl.train.update as update
    from memrl.rl.across_ranks import all_ranks

    _recording(str(tmp_path / "single.jsonl"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks run (tests/dist/helpers.py): the same reduction order, ties alike
    # one process pools nothing; ask for the pool anyway (without a process group it is its own tokens) to record it
    update.bonus_tokens = lambda *a, **kw: objective.bonus_tokens(*a, **{**kw, "across_ranks": True})
    try:
        Trainer(config(tmp_path / "single", **OVER), engine=coin_engine(load_tokenizer("tiny"), seed=5)).run()
    finally:
        objective.all_ranks, update.bonus_tokens = all_ranks, objective.bonus_tokens
        torch.set_num_threads(threads)
    cfg = config(tmp_path / "ranks", cluster__trainers=2, cluster__backend="gloo", cluster__strategy=strategy, **OVER)
    mp.start_processes(_recorded_rank, args=(cfg.model_dump(mode="json"), 2, free_port(), str(tmp_path)), nprocs=2,
                       start_method="spawn")
    single, r0, r1 = (_pools(tmp_path / f"{n}.jsonl") for n in ("single", 0, 1))
    assert len(single) == len(r0) == len(r1) == 4  # 2 steps x 2 mini-batches, one micro-batch each
    for one, a, b in zip(single, r0, r1):
        assert a["pool"] == b["pool"] and len(a["pool"]) == a["own"] + b["own"] == one["own"]
        assert 0 < a["own"] < one["own"]
        assert a["pool"] == pytest.approx(one["pool"], abs=1e-5)
    a, b = _metrics(tmp_path / "single" / "run"), _metrics(tmp_path / "ranks" / "run")
    assert [m["step"] for m in b] == [1, 2] and all(m["skipped_updates"] == 0 for m in b)
    for key in ("pg_loss", "entropy", "grad_norm", "entropy_coef"):
        assert b[0][key] == pytest.approx(a[0][key], rel=1e-4, abs=1e-6), key


@pytest.mark.timeout(600)
def test_ddp_ranks_with_different_micro_batch_counts_run_as_many_passes(tmp_path):
    """A 300-token budget splits the first mini-batch's shards into 8 and 7 micro-batches (the rows of this
    config: 146 to 315 tokens); DDP-style ranks ran their own counts, so one rank's extra threshold gather would
    wait forever: the short rank now adds a padding pass that joins with no tokens, without a forward pass."""
    load_tokenizer("tiny")
    cfg = config(tmp_path / "ranks", cluster__trainers=2, cluster__backend="gloo", cluster__strategy="ddp",
                 trainer__micro_batch_tokens=300, **OVER)
    mp.start_processes(_counted_rank, args=(cfg.model_dump(mode="json"), 2, free_port(), str(tmp_path)), nprocs=2,
                       start_method="spawn")
    r0, r1 = (_pools(tmp_path / f"{n}.jsonl") for n in (0, 1))
    assert len(r0) == len(r1) and any(line["own"] == 0 for line in r0 + r1)  # as many passes, some padding
    for n, pools in ((0, r0), (1, r1)):  # a forward for each pass with tokens of its own, none for padding
        forwards = len((tmp_path / f"{n}.forward").read_text().splitlines())
        assert forwards == sum(line["own"] > 0 for line in pools)
    b = _metrics(tmp_path / "ranks" / "run")
    assert [m["step"] for m in b] == [1, 2]
    assert all(math.isfinite(m["pg_loss"]) and math.isfinite(m["grad_norm"]) and m["skipped_updates"] == 0
               for m in b)
