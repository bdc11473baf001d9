"""The estimator example in docs/reference/algorithms.md runs as a user pastes it and gives hand-checked numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from memrl.config.registry import ADV_ESTIMATORS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "algorithms.md"


def test_group_median_example_matches_hand_values():
    block = next(b for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S) if "grpo_median" in b)
    namespace: dict = {}
    try:
        exec(compile(block, str(PAGE), "exec"), namespace)  # the page's own code, as a user pastes it
        est = ADV_ESTIMATORS.get("grpo_median")
        got = est(torch.tensor([1.0, 0.0, 1.0, 3.0, 0.0, 0.0, 1.0]), ["a", "a", "a", "b", "b", "b", "b"],
                  epsilon=1e-6)
    finally:
        ADV_ESTIMATORS.remove("grpo_median")
    # a: median 1; b: 0 0 1 3, torch's lower middle value 0
    assert got.tolist() == pytest.approx([0.0, -1.0, 0.0, 3.0, 0.0, 0.0, 1.0])
    assert est.needs_group
