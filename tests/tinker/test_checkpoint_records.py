"""A checkpoint in ``--state-dir`` is a file on disk, not trusted: its optimizer moments must fit the adapter."""

from __future__ import annotations

import pytest
import torch

from memrl.tinker.tenants import load_optimizer_state


def test_optimizer_moments_of_another_shape_are_refused_and_nothing_is_loaded():
    a, b = torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.AdamW([a, b])
    good = {"a::exp_avg": torch.ones(2, 3), "a::exp_avg_sq": torch.ones(2, 3), "a::step": torch.tensor(3.0)}
    with pytest.raises(ValueError, match=r"b::exp_avg has shape \(5,\), the adapter's \(4,\)"):
        load_optimizer_state(opt, {"a": a, "b": b}, {**good, "b::exp_avg": torch.ones(5)})
    assert not opt.state  # all or nothing: a's moments were not kept either
    load_optimizer_state(opt, {"a": a, "b": b}, good)
    assert torch.equal(opt.state[a]["exp_avg"], torch.ones(2, 3)) and float(opt.state[a]["step"]) == 3.0
