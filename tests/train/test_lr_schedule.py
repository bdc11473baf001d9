"""The learning-rate schedule, against verl's: ``get_constant_schedule_with_warmup`` / ``get_cosine_schedule_with_warmup``
(``verl/utils/torch_functional.py``: ``min(1, s / warmup)`` while warming up) stepped after each update, so
optimizer step ``s`` (0-based) runs at that factor."""

from __future__ import annotations

import math

import pytest

from memrl.train.setup import lr_lambda


def test_warmup_starts_at_zero_as_verl():
    assert [lr_lambda(s, 20, 200, "constant") for s in (0, 1, 2, 19, 20, 150)] == [0.0, 0.05, 0.1, 0.95, 1.0, 1.0]
    assert lr_lambda(0, 0, 200, "constant") == 1.0  # no warmup: full rate from the first step


def test_cosine_after_warmup_by_hand():
    # progress (s - warmup) / (total - warmup): s = 60 of 10..110 is halfway, cos(pi/2) = 0 -> 0.5
    assert lr_lambda(60, 10, 110, "cosine") == pytest.approx(0.5)
    assert lr_lambda(10, 10, 110, "cosine") == pytest.approx(1.0)
    assert lr_lambda(35, 10, 110, "cosine") == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))
    assert lr_lambda(110, 10, 110, "cosine") == pytest.approx(0.0, abs=1e-12)
