"""RULER's two scores, and which task uses which.

RULER scores a prediction by plain substring containment, case-insensitive, with
no other normalisation: ``string_match_all`` is the fraction of gold strings found
in the prediction (every needle value, every variable name, every frequent word
must be there), ``string_match_part`` is 1 when any one gold is found (QA, where
the golds are alternative phrasings of one answer). RULER uses ``all`` for the NIAH,
variable-tracking, CWE and FWE tasks and ``part`` for QA, on the raw response. memrl's own
protocol scores the answer it extracts (:func:`prediction_text`: the box, else the whole
response), which is neither RULER's raw response nor MemAgent's extraction (0 when nothing
is extracted).

Under ``eval.protocol memagent`` the scores are MemAgent's ``ruler_general.py`` instead
(:func:`memagent_score`): the answer is extracted from the response (after its last
``</think>``) by ``workflow.answer_format`` with no fallback to the whole response (no answer
scores 0); QA is normalised, bidirectional sub-EM against ``answers[0]`` only (``"Pa"`` for gold
``["Paris"]`` scores 1); the other tasks are ``string_match_all`` on the raw answer (lowercased,
no other clean-up), rounded to two decimals per item as the script does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memrl.rewards.published import after_think, published_answer, score_published
from memrl.rewards.qa import extract_boxed

METRICS = ("string_match_all", "string_match_part")
_CONTROL = re.compile(r"[\x00-\x1f]")


def clean_prediction(text: str | None) -> str:
    """The prediction with ASCII control characters turned into newlines and ends stripped (RULER's clean-up)."""
    if not text:
        return ""
    return _CONTROL.sub("\n", text.strip()).strip()


def string_match_all(prediction: str | None, golds: Sequence[str]) -> float:
    """Fraction of ``golds`` contained in ``prediction``, ignoring case; 0 for no golds."""
    if not golds:
        return 0.0
    pred = clean_prediction(prediction).lower()
    return sum(1.0 for g in golds if g.lower() in pred) / len(golds)


def string_match_part(prediction: str | None, golds: Sequence[str]) -> float:
    """1.0 when any of ``golds`` is contained in ``prediction``, ignoring case."""
    pred = clean_prediction(prediction).lower()
    return float(any(g.lower() in pred for g in golds))


def score(metric: str, prediction: str | None, golds: Sequence[str]) -> float:
    """Score by metric name (``string_match_all`` or ``string_match_part``)."""
    if metric == "string_match_all":
        return string_match_all(prediction, golds)
    if metric == "string_match_part":
        return string_match_part(prediction, golds)
    raise ValueError(f"unknown RULER metric {metric!r}; expected one of {', '.join(METRICS)}")


def prediction_text(final_text: str | None) -> str:
    """What memrl's protocol scores: the last ``\\boxed{}`` answer when there is one, else the whole final
    response (as RULER scores it), so a model that lists the values in prose still gets credit for them.
    MemAgent's script has no such fallback: nothing extracted scores 0 there (:func:`memagent_score`)."""
    boxed = extract_boxed(final_text)
    return boxed if boxed is not None else (final_text or "")


def memagent_score(metric: str, final_text: str | None, golds: Sequence[str], fmt: str = "boxed") -> tuple[str | None,
                                                                                                          float]:
    """(the extracted answer, its score) as MemAgent's RULER script scores one response.

    ``string_match_part`` marks QA (MemAgent branches on "qa" in the split name): sub-EM of the
    published protocol against the first gold. Other tasks: RULER's ``string_match_all`` without
    RULER's clean-up, 0 when nothing was extracted.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown RULER metric {metric!r}; expected one of {', '.join(METRICS)}")
    answer = published_answer(after_think((final_text or "").strip()), fmt)
    if not answer or not golds:
        return answer, 0.0
    if metric == "string_match_part":
        return answer, score_published(final_text, golds, fmt).sub_em
    # per item rounded to two decimals, as the script's calc_metrics does for a batch of one
    return answer, round(sum(1.0 for g in golds if g.lower() in answer.lower()) / len(golds), 2)
