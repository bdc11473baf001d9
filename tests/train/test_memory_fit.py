"""The update splits its micro-batches further where their backward would not fit in memory (and says so once),
instead of being killed in its first update; never where every rank or the entropy mask needs the split."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from memrl.config import MemRLConfig
from memrl.models.resolve import load_tokenizer
from memrl.train import memory_fit
from memrl.train.batch import Row, micro_batches
from memrl.train.memory_fit import MemoryModel, activation_bytes, memory_model
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config

GIB = 2**30


class Shaped(torch.nn.Module):
    """A model with SmolLM2-135M's shape in its config and a small trainable weight."""

    def __init__(self, dtype=torch.float32, attention="sdpa"):
        super().__init__()
        self.config = SimpleNamespace(num_hidden_layers=30, hidden_size=576, intermediate_size=1536,
                                      num_attention_heads=9, _attn_implementation=attention)
        self.w = torch.nn.Parameter(torch.zeros(1000, dtype=dtype))


def test_activation_bytes_of_smollm2s_shape_by_hand():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    # 30 layers x (10 x 576 + 4 x 1536) values x 4 bytes; CPU SDPA: 30 layers x 9 heads x 2 bytes per squared length
    assert activation_bytes(Shaped(), cpu) == (1_428_480, 540)
    assert activation_bytes(Shaped(), gpu) == (1_428_480, 0)  # CUDA's SDPA keeps no [L, L] matrix
    assert activation_bytes(Shaped(torch.bfloat16), gpu) == (714_240, 0)
    assert activation_bytes(Shaped(attention="eager"), gpu) == (1_428_480, 30 * 9 * 8)


def cfg_with(trainer=None, algorithm=None) -> MemRLConfig:
    return MemRLConfig.model_validate({"model": {"path": "tiny"}, "trainer": trainer or {},
                                       "algorithm": algorithm or {}})


@pytest.mark.parametrize("trainer, algorithm, world", [({"gradient_checkpointing": True}, {}, 1), ({}, {}, 2),
                                                       ({}, {"top_entropy_quantile": 0.2}, 1)])
def test_no_split_by_memory_where_the_split_is_not_ours_to_change(monkeypatch, trainer, algorithm, world):
    monkeypatch.setattr(memory_fit, "free_bytes", lambda device: GIB)
    assert memory_model(cfg_with(trainer, algorithm), Shaped(), torch.device("cpu"), world) is None


def test_the_budget_is_the_headroom_less_the_optimizer_state(monkeypatch):
    monkeypatch.setattr(memory_fit, "free_bytes", lambda device: 10 * GIB)
    model = memory_model(cfg_with(), Shaped(), torch.device("cpu"))
    assert model == MemoryModel(1_428_480, 540, 0.7 * 10 * GIB - 12_000)  # 1000 float32 weights x (grad + 2 moments)
    # 3 rows of 2,300 tokens: 3 x (2,300 x 1,428,480 + 2,300^2 x 540) = 18.4 GiB; one row: 6.1 GiB
    assert not model.fits(3, 2300) and model.fits(1, 2300)


def rows(lengths):
    return [Row(token_ids=[k + 1] * n, loss_mask=[0] + [1] * (n - 1), engine_logprobs=[0.0] * n, episode=k, step=1)
            for k, n in enumerate(lengths)]


def test_micro_batches_split_by_memory_as_well_as_tokens():
    batch = rows([100, 100, 100, 100])
    assert [len(g) for g in micro_batches(batch, 16384)] == [4]
    assert [len(g) for g in micro_batches(batch, 16384, lambda n, longest: n * longest <= 200)] == [2, 2]
    assert [len(g) for g in micro_batches(batch, 16384, lambda n, longest: False)] == [1, 1, 1, 1]  # one row each


def test_a_run_short_of_memory_splits_and_says_so_once(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_fit, "free_bytes", lambda device: 32 * 2**20)  # a tiny model in a tinier machine
    out = io.StringIO()
    trainer = Trainer(config(tmp_path, trainer__total_steps=2), engine=coin_engine(load_tokenizer("tiny")),
                      tracker_console=Console(file=out, width=400))
    trainer.run()
    said = out.getvalue()
    assert said.count("micro-batches split further than trainer.micro_batch_tokens=16384: ") == 1, said
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 2
