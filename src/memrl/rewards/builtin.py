"""memrl's built-in rewards, in the plug-in reward protocol (registered in :mod:`memrl.plugins`).

Each takes the final response's text, the gold answers and the answer that
``workflow.answer_format`` extracted, and returns a float: a plug-in reward
(``workflow.reward=pkg.module:fn``) has the same signature.
"""

from __future__ import annotations

from collections.abc import Sequence

from memrl.rewards.published import memagent_strict_reward
from memrl.rewards.qa import score_answer


def em(text: str, golds: Sequence[str], answer: str | None) -> float:
    """Exact match of the extracted answer, max over golds (HotpotQA normalisation)."""
    return score_answer(answer, golds).em


def sub_em(text: str, golds: Sequence[str], answer: str | None) -> float:
    """A normalised gold answer contained in the extracted answer, max over golds."""
    return score_answer(answer, golds).sub_em


def f1(text: str, golds: Sequence[str], answer: str | None) -> float:
    """Token F1 of the extracted answer, max over golds."""
    return score_answer(answer, golds).f1


def memagent_strict(text: str, golds: Sequence[str], answer: str | None) -> float:
    """MemAgent's RL reward, computed on the raw text (see :func:`memagent_strict_reward`)."""
    return memagent_strict_reward(text, golds)
