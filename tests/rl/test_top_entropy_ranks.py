"""``algorithm.top_entropy_quantile`` over several ranks: the threshold is the quantile of every rank's micro-batch
tokens, as TRL's get_high_entropy_mask gathers its processes' (trl/trainer/grpo_trainer.py: pad across
processes, ``accelerator.gather``, drop the padding, ``torch.quantile``), not each rank's own; without a process
group the result is the one process's, as before."""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp

from memrl.config.algorithm import AlgorithmConfig
from memrl.rl.across_ranks import all_ranks, spans_ranks
from memrl.rl.functional import high_entropy_mask
from memrl.rl.objective import bonus_tokens

Part = tuple[torch.Tensor, torch.Tensor]  # one rank's (entropy, mask)


def concatenated(parts: list[Part], quantile: float) -> list[torch.Tensor]:
    """Each rank's mask under the threshold of every rank's tokens together (TRL's gathered quantile)."""
    pool = torch.cat([e[m.bool()].float() for e, m in parts])
    return [high_entropy_mask(e, m, quantile, pool=lambda _: pool) for e, m in parts]


# (rank 0's (entropy, mask), rank 1's, quantile): a case checked by hand (each rank's own median happens to keep
# the same tokens there), one where each rank's own median keeps other tokens than the joint one, a rank without
# tokens.
CASES = [
    ((torch.tensor([[0.1, 0.5]]), torch.ones(1, 2)), (torch.tensor([[0.9, 0.3, 0.7]]), torch.ones(1, 3)), 0.5),
    ((torch.tensor([[0.1, 0.2, 0.3]]), torch.ones(1, 3)), (torch.tensor([[0.7, 0.8, 0.9]]), torch.ones(1, 3)), 0.5),
    ((torch.tensor([[0.4, 0.1], [0.6, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])),  # rank 1: no token
     (torch.tensor([[0.9, 0.2]]), torch.zeros(1, 2)), 0.5),
]


def _random_cases(seed: int) -> list[tuple[Part, Part, float]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for trial in range(20):
        parts = []
        for rows, width in ((1 + trial % 3, 2 + trial % 5), (2 + trial % 4, 1 + trial % 7)):  # different sizes
            entropy = torch.rand(rows, width, generator=g) * 3
            parts.append((entropy, (torch.rand(rows, width, generator=g) < 0.7).float()))
        out.append((parts[0], parts[1], (0.0, 0.2, 0.5, 0.8, 1.0)[trial % 5]))
    return out


def _rank(rank: int, port: int, out: str) -> None:
    """One gloo rank: its masks for every case, then one call where rank 1 joins with no tokens (a padding pass)."""
    import torch.distributed as dist

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        got = [high_entropy_mask(*case[rank], case[2], pool=all_ranks) for case in CASES + _random_cases(0)]
        algorithm = AlgorithmConfig(top_entropy_quantile=0.5)
        entropy, mask = CASES[1][rank]
        padding = bonus_tokens(entropy, mask, algorithm, across_ranks=True, contribute=rank == 0)  # 1: padding
        alone = bonus_tokens(entropy, mask, algorithm)  # not asked across ranks: local, no collective
        torch.save({"masks": got, "padding": padding, "spans": spans_ranks(), "alone": alone,
                    "own": high_entropy_mask(entropy, mask, 0.5).float()}, os.path.join(out, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_without_a_process_group_the_mask_is_the_one_process_s():
    assert not spans_ranks()
    values = torch.tensor([0.3, 0.1])
    assert torch.equal(all_ranks(values), values) and all_ranks(values, contribute=False).numel() == 0
    g = torch.Generator().manual_seed(2)
    algorithm = AlgorithmConfig(top_entropy_quantile=0.3)
    for _ in range(50):
        entropy, mask = torch.rand(3, 5, generator=g), (torch.rand(3, 5, generator=g) < 0.6).float()
        own = high_entropy_mask(entropy, mask, 0.7)
        assert torch.equal(high_entropy_mask(entropy, mask, 0.7, pool=all_ranks), own)
        assert torch.equal(bonus_tokens(entropy, mask, algorithm), own.float())


@pytest.mark.timeout(300)
def test_two_gloo_ranks_take_the_quantile_of_both_ranks_tokens(tmp_path):
    from memrl.dist.ddp import free_port

    mp.start_processes(_rank, args=(free_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    got = [torch.load(tmp_path / f"{r}.pt") for r in (0, 1)]
    assert got[0]["spans"] and got[1]["spans"]
    for i, case in enumerate(CASES + _random_cases(0)):
        want = concatenated([case[0], case[1]], case[2])
        assert torch.equal(got[0]["masks"][i], want[0]) and torch.equal(got[1]["masks"][i], want[1]), i
    # by hand: 0.1 0.5 | 0.9 0.3 0.7 -> sorted 0.1 0.3 0.5 0.7 0.9, median 0.5: rank 0 keeps 0.5, rank 1 0.9 and 0.7
    assert got[0]["masks"][0].tolist() == [[False, True]] and got[1]["masks"][0].tolist() == [[True, False, True]]
    # 0.1 0.2 0.3 | 0.7 0.8 0.9: the joint median is 0.5, so rank 0 keeps none and rank 1 all (each rank's own
    # median, 0.2 and 0.8, kept two on each)
    assert not got[0]["masks"][1].any() and got[1]["masks"][1].all()
    # rank 1 without tokens: rank 0's threshold is its own (median of 0.4 0.1 0.6 = 0.4), rank 1 keeps nothing
    assert got[0]["masks"][2].tolist() == [[True, False], [True, False]] and not got[1]["masks"][2].any()
    # a padding pass adds no token: rank 0's median is that of 0.1 0.2 0.3 alone
    assert got[0]["padding"].tolist() == [[0.0, 1.0, 1.0]]
    for rank in (0, 1):  # not asked to pool across ranks, inside a process group too: its own micro-batch's
        assert torch.equal(got[rank]["alone"], got[rank]["own"])
