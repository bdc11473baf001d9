"""Reward functions: QA scoring of boxed answers (HotpotQA/SQuAD semantics)."""

from memrl.rewards.qa import (
    QAScores,
    exact_match,
    extract_boxed,
    f1_score,
    normalize_answer,
    score_answer,
    score_response,
    sub_exact_match,
)

__all__ = [
    "QAScores",
    "exact_match",
    "extract_boxed",
    "f1_score",
    "normalize_answer",
    "score_answer",
    "score_response",
    "sub_exact_match",
]
