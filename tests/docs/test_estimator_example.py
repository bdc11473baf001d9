"""The estimator example in docs/reference/algorithms.md runs and gives TRL's scale_rewards="batch" numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from memrl.config.registry import ADV_ESTIMATORS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "algorithms.md"


def test_batch_std_example_matches_hand_values():
    block = next(b for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S) if "grpo_batch_std" in b)
    namespace: dict = {}
    try:
        exec(compile(block, str(PAGE), "exec"), namespace)  # the page's own code, as a user pastes it
        fn = namespace["grpo_batch_std"]
        scores = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
        got = fn(scores, ["a", "a", "a", "b", "b", "b"], epsilon=1e-4)
    finally:
        ADV_ESTIMATORS.remove("grpo_batch_std")
    # group means 2/3 and 1/3; the batch's unbiased std of three 1s and three 0s is sqrt(0.3)
    std = 0.3 ** 0.5 + 1e-4
    want = torch.tensor([1 / 3, -2 / 3, 1 / 3, 2 / 3, -1 / 3, -1 / 3]) / std
    assert got == pytest.approx(want.tolist(), abs=1e-6)
