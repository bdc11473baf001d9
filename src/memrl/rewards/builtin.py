"""memrl's built-in rewards, in the reward protocol of :mod:`memrl.plugins` (registered there).

Each takes the final response's text, the sample (whose gold answers it scores against)
and the answer that ``workflow.options.answer_format`` extracted: TRL's
``reward(text, *, sample, answer=None, **kw) -> float`` shape, which a plug-in reward
(``workflow.options.reward=pkg.module:fn``) has too.
"""

from __future__ import annotations

from typing import Any

from memrl.rewards.published import memagent_strict_reward
from memrl.rewards.qa import score_answer


def _golds(sample: Any) -> list[str]:
    from memrl.plugins import gold_answers

    return gold_answers(sample)


def em(text: str, *, sample: Any, answer: str | None = None, **kw: Any) -> float:
    """Exact match of the extracted answer, max over golds (HotpotQA normalisation)."""
    return score_answer(answer, _golds(sample)).em


def sub_em(text: str, *, sample: Any, answer: str | None = None, **kw: Any) -> float:
    """A normalised gold answer contained in the extracted answer, max over golds."""
    return score_answer(answer, _golds(sample)).sub_em


def f1(text: str, *, sample: Any, answer: str | None = None, **kw: Any) -> float:
    """Token F1 of the extracted answer, max over golds."""
    return score_answer(answer, _golds(sample)).f1


def memagent_strict(text: str, *, sample: Any, answer: str | None = None, **kw: Any) -> float:
    """MemAgent's RL reward, computed on the raw text (see :func:`memagent_strict_reward`)."""
    return memagent_strict_reward(text, _golds(sample))
