"""QA rewards on the final ``\\boxed{}`` answer.

Normalisation, exact match and token F1 follow the official HotpotQA evaluator
(itself the SQuAD v1.1 script), including its order of operations
(lowercase -> strip ASCII punctuation -> drop the articles a/an/the -> collapse
whitespace) and its yes/no/noanswer special case in F1. These are the numbers
papers report, so they are reproduced exactly rather than "improved", with one
exception: a gold answer that normalises to the empty string scores 0 for
every prediction (the official script gives sub-EM 1 to anything, since ``""``
is a substring of every answer; as an RL reward that is a hack to exploit, and
real HotpotQA golds are never empty, so reported numbers do not change).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_BOXED = re.compile(r"\\boxed\s*\{")
_YES_NO = ("yes", "no", "noanswer")


def normalize_answer(text: str | None) -> str:
    """HotpotQA/SQuAD normalisation; ``None`` normalises to the empty string."""
    if text is None:
        return ""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def extract_boxed(text: str | None) -> str | None:
    """Return the content of the LAST ``\\boxed{...}`` in ``text``, braces matched.

    ``\\boxed {x}`` (whitespace before the brace) is accepted. Returns ``None``
    when there is no box or when the last box is never closed (a truncated
    generation): a half-written answer must not be scored as if it were final.
    Nested braces such as ``\\boxed{\\frac{1}{2}}`` are kept whole.
    """
    if not text:
        return None
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    start = starts[-1]
    depth = 1
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
    return None


def exact_match(prediction: str | None, gold: str) -> float:
    """1.0 when the normalised strings are equal (HotpotQA ``exact_match_score``).

    A gold that normalises to nothing (``""``, ``"the"``) scores 0: it is a broken label, and
    matching it would reward an empty answer.
    """
    if prediction is None:
        return 0.0
    ref = normalize_answer(gold)
    return float(bool(ref) and normalize_answer(prediction) == ref)


def sub_exact_match(prediction: str | None, gold: str, bidirectional: bool = False) -> float:
    """1.0 when the normalised gold answer is contained in the normalised prediction.

    ``bidirectional=True`` also accepts prediction-inside-gold, as MemAgent's and
    ReMemR1's evaluation scripts do. That variant gives an empty prediction full
    credit, which is why it is not the default.

    A gold that normalises to nothing scores 0: the empty string is contained in every
    prediction, so scoring it 1 would reward any boxed answer (a reward hack).
    """
    if prediction is None:
        return 0.0
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if not ref:
        return 0.0
    if ref in pred:
        return 1.0
    return float(bidirectional and pred in ref)


def f1_prf(prediction: str | None, gold: str) -> tuple[float, float, float]:
    """Token-level (F1, precision, recall) with HotpotQA's yes/no/noanswer rule."""
    if prediction is None:
        return 0.0, 0.0, 0.0
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    # Yes/no answers are all-or-nothing: partial token overlap must not score.
    if (pred in _YES_NO or ref in _YES_NO) and pred != ref:
        return 0.0, 0.0, 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    common = Counter(pred_tokens) & Counter(ref_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0, 0.0, 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def f1_score(prediction: str | None, gold: str) -> float:
    """Token F1 (see :func:`f1_prf`)."""
    return f1_prf(prediction, gold)[0]


@dataclass(frozen=True)
class QAScores:
    """Scores of one prediction, each the max over the gold answers."""

    em: float
    sub_em: float
    f1: float
    answered: bool

    def to_dict(self) -> dict[str, float | bool]:
        return asdict(self)


def _as_golds(golds: str | Iterable[str]) -> Sequence[str]:
    if isinstance(golds, str):
        return [golds]
    out = [str(g) for g in golds]
    if not out:
        raise ValueError("at least one gold answer is required")
    return out


def score_answer(
    prediction: str | None, golds: str | Iterable[str], bidirectional_sub_em: bool = False
) -> QAScores:
    """Score an already-extracted answer against one or several gold answers."""
    refs = _as_golds(golds)
    return QAScores(
        em=max(exact_match(prediction, g) for g in refs),
        sub_em=max(sub_exact_match(prediction, g, bidirectional_sub_em) for g in refs),
        f1=max(f1_score(prediction, g) for g in refs),
        answered=prediction is not None,
    )


def score_response(
    response: str | None, golds: str | Iterable[str], bidirectional_sub_em: bool = False
) -> QAScores:
    """Extract the last boxed answer of a model response and score it."""
    return score_answer(extract_boxed(response), golds, bidirectional_sub_em)
