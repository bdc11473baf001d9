"""A graded stand-in reward for the real-model training test (``workflow.reward=tests.real.rewards:distinct_words``).

A 135M model scores 0 on the QA reward in a few steps, so every GRPO group would have zero advantages and
the policy would not move (KL 0 at every step proves nothing). This reward differs between episodes, so
the policy is updated and the KL to the reference grows after step 1.
"""

from __future__ import annotations

from collections.abc import Sequence


def distinct_words(text: str, golds: Sequence[str], answer: str | None) -> float:
    """Distinct words in the final answer over 100 (a 16-token answer has 5-15: rewards differ)."""
    return len(set(text.split())) / 100
