"""The update's micro-batch fits the memory the machine has: lowered (and said) when left at its default,
kept with a warning when the user chose it; a run is never killed silently in its first update."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from memrl.config import MemRLConfig
from memrl.models.resolve import load_tokenizer
from memrl.train import memory_fit
from memrl.train.memory_fit import activation_bytes_per_token, fit_micro_batch
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config

GIB = 2**30


class Shaped(torch.nn.Module):
    """A model with SmolLM2-135M's shape in its config and a small trainable weight."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.config = SimpleNamespace(num_hidden_layers=30, hidden_size=576, intermediate_size=1536)
        self.w = torch.nn.Parameter(torch.zeros(1000, dtype=dtype))


def test_activation_bytes_of_smollm2s_shape_by_hand():
    # 30 layers x (10 x 576 + 4 x 1536) values x 4 bytes = 30 x 11,904 x 4
    assert activation_bytes_per_token(Shaped()) == 1_428_480
    assert activation_bytes_per_token(Shaped(torch.bfloat16)) == 714_240


def cfg_with(**trainer) -> MemRLConfig:
    return MemRLConfig.model_validate({"model": {"path": "tiny"}, "trainer": trainer})


def test_a_default_micro_batch_too_big_for_the_memory_is_lowered_and_said(monkeypatch):
    monkeypatch.setattr(memory_fit, "free_bytes", lambda device: 8 * GIB)
    fit = fit_micro_batch(cfg_with(), Shaped(), torch.device("cpu"))
    # budget 0.7 x 8 GiB - 12,000 bytes of state: 4096 tokens (5.4 GiB) fit, 8192 (10.9 GiB) do not
    assert fit.tokens == 4096
    assert fit.line.startswith("trainer.micro_batch_tokens 16384 -> 4096: a micro-batch of 16384 tokens keeps "
                               "~21.8 GiB of activations for the backward pass and cpu has 8.0 GiB free")


@pytest.mark.parametrize("trainer, algorithm, world", [({"micro_batch_tokens": 16384}, {}, 1), ({}, {}, 2),
                                                       ({}, {"top_entropy_quantile": 0.2}, 1)])
def test_a_chosen_or_shared_split_is_kept_with_what_to_change(monkeypatch, trainer, algorithm, world):
    monkeypatch.setattr(memory_fit, "free_bytes", lambda device: 8 * GIB)
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "trainer": trainer, "algorithm": algorithm})
    fit = fit_micro_batch(cfg, Shaped(), torch.device("cpu"), world)
    assert fit.tokens == 16384
    assert "set trainer.micro_batch_tokens=4096 or trainer.gradient_checkpointing=true" in fit.line


@pytest.mark.parametrize("free, trainer", [(64 * GIB, {}), (1 * GIB, {"gradient_checkpointing": True}),
                                           (None, {})])
def test_nothing_changes_when_it_fits_or_cannot_be_told(monkeypatch, free, trainer):
    monkeypatch.setattr(memory_fit, "free_bytes", lambda device: free)
    assert fit_micro_batch(cfg_with(**trainer), Shaped(), torch.device("cpu")) == memory_fit.Fit(16384, None)


def test_a_run_trains_with_the_lowered_micro_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_fit, "free_bytes", lambda device: 64 * 2**20)  # a tiny model in a tinier machine
    out = io.StringIO()
    trainer = Trainer(config(tmp_path, trainer__total_steps=1), engine=coin_engine(load_tokenizer("tiny")),
                      tracker_console=Console(file=out, width=400))
    lowered = trainer.cfg.trainer.micro_batch_tokens
    assert 256 <= lowered < 16384 and f"trainer.micro_batch_tokens 16384 -> {lowered}:" in out.getvalue()
    trainer.run()
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
    assert "micro_batch_tokens: 16384" in (tmp_path / "run" / "config.yaml").read_text()  # what the user asked
