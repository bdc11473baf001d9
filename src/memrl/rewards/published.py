"""Answer extraction and scoring as MemAgent's and ReMemR1's own scripts do it.

Published numbers are only comparable when the scoring matches, and the originals'
scoring differs from memrl's default in ways that move accuracy by several points.
This module reproduces their *behaviour* (checked against their public evaluation and
reward code); :mod:`memrl.rewards.qa` keeps memrl's stricter scoring.

Evaluation protocols (``eval.protocol``):

``memrl`` (default)
    The workflow's own scores: HotpotQA normalisation, one-way sub-EM (the gold answer
    must appear in the prediction), EM and F1, each the max over all gold answers. A
    missing answer scores 0.
``memagent`` / ``rememr1``
    The RULER-HQA scripts of both papers (the two are the same code): the response is
    cut after its last ``</think>`` when there is one; the answer is extracted
    (``workflow.answer_format``); an empty or missing answer scores 0 on every metric;
    otherwise it is compared with the FIRST gold answer only, after HotpotQA
    normalisation, and sub-EM is bidirectional (gold in prediction OR prediction in
    gold, so ``"Paris"`` for gold ``"Paris, France"`` counts). F1 keeps HotpotQA's
    yes/no/noanswer rule and, like the originals, is rounded to two decimals per item.
    The boxed answer is read as the originals read it (:mod:`memrl.rewards.original_boxed`:
    ``\\boxed {x}`` reads ``{x}``, nothing is stripped). Quirk kept on purpose: a non-empty
    answer that normalises to nothing (``"The."``, ``\\boxed{ }``) is contained in every gold
    and so scores sub-EM 1 there, and so does any answer for a gold that normalises to nothing
    (``"the"``; EM 1 too when the answer also normalises to nothing), as in the originals.
    Episodes that failed (engine error) are left out of the denominator, as the
    scripts skip items without output; so is an empty final response, which the
    scripts cannot tell from a failure and skip too (``skipped_empty`` counts them).

Training reward ``memagent_strict`` (``workflow.reward``): MemAgent's (and ReMemR1's)
RL reward. Only the last 300 characters of the final response are read, lowercased;
the last box there, read as the original reads it, is the answer (a box it cannot read scores 0); answer and each gold go through the MATH
(Hendrycks) string normalisation, which among other things deletes every space; the
reward is 1 for an exact match with any gold, else 0. It is stricter than any eval
metric above (``"New York City"`` vs gold ``"New York"`` is 0), which is what the
MemAgent paper trained with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memrl.rewards.original_boxed import Unreadable, box_content, last_box, original_boxed
from memrl.rewards.qa import QAScores, extract_boxed, f1_score, normalize_answer, score_answer

PROTOCOLS = ("memrl", "memagent", "rememr1")

# What the numbers in a report mean, per protocol (written into results.json / results.md).
METRIC_LABELS = {
    "memrl": "sub-EM: normalised gold answer contained in the prediction (one-way), max over golds; "
             "EM and F1 max over golds",
    "memagent": "sub-EM as MemAgent's RULER-HQA script: bidirectional containment against the first gold, "
                "empty answer 0; EM and F1 (yes/no rule, 2-decimal items) against the first gold",
    "rememr1": "sub-EM as ReMemR1's test script: bidirectional containment against the first gold, "
               "empty answer 0; EM and F1 (yes/no rule, 2-decimal items) against the first gold",
}

# DeepSeek-R1 chat specials the originals strip from an "answer is" tail.
_R1_SPECIALS = ("<｜Assistant｜>", "<｜end▁of▁sentence｜>")
_ANSWER_IS = "the answer is"


def after_think(text: str) -> str:
    """The part after the last ``</think>`` (the whole text when there is none or nothing follows)."""
    if "</think>" in text:
        tail = text.rsplit("</think>", 1)[-1].strip()
        if tail:
            return tail
    return text


def extract_answer_is(text: str | None) -> str | None:
    """What follows the last ``the answer is`` (MemAgent's eval of its RL checkpoints).

    As the original: markdown ``*`` removed first, the phrase matched case-sensitively
    (its final prompt asks for "Therefore, the answer is ..."), everything after it kept
    (several lines included), then trailing/leading spaces and dots trimmed.
    ``None`` when the phrase is absent.
    """
    if not text:
        return None
    text = text.replace("*", "")
    if _ANSWER_IS not in text:
        return None
    tail = text.rsplit(_ANSWER_IS, 1)[-1].strip()
    for special in _R1_SPECIALS:
        tail = tail.replace(special, "")
    return tail.strip().strip(".").strip()


def check_answer_format(fmt: str) -> str:
    """Validate ``boxed`` | ``answer_is`` | ``regex:<pattern>`` (the pattern must compile)."""
    if fmt in ("boxed", "answer_is"):
        return fmt
    if fmt.startswith("regex:"):
        pattern = fmt[len("regex:"):]
        if not pattern:
            raise ValueError("answer_format 'regex:' needs a pattern, e.g. regex:Answer:\\s*(.+)")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"answer_format {fmt!r}: not a valid regular expression ({exc})") from None
        return fmt
    raise ValueError(f"answer_format must be boxed, answer_is or regex:<pattern>, got {fmt!r}")


def published_answer(text: str | None, fmt: str = "boxed") -> str | None:
    """The answer as the published protocols read it: ``boxed`` the originals' way
    (:mod:`memrl.rewards.original_boxed`: ``\\boxed `` forms, nothing stripped), other formats as memrl's."""
    return original_boxed(text) if fmt == "boxed" else extract_answer(text, fmt)


def extract_answer(text: str | None, fmt: str = "boxed") -> str | None:
    """The answer in a final response under ``workflow.answer_format``.

    ``regex:<pattern>`` takes the LAST match (a model restating its answer is judged on
    the restatement), its first group when the pattern has one, else the whole match.
    """
    if fmt == "boxed":
        return extract_boxed(text)
    if fmt == "answer_is":
        return extract_answer_is(text)
    if not text:
        return None
    pattern = re.compile(check_answer_format(fmt)[len("regex:"):], re.DOTALL)
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    return (last.group(1) if pattern.groups else last.group(0)).strip()


@dataclass(frozen=True)
class PublishedScores:
    """Scores of one response under a published protocol (the answer it was scored on included)."""

    em: float
    sub_em: float
    f1: float
    answer: str | None

    @property
    def answered(self) -> bool:
        return bool(self.answer)


def score_published(response: str | None, golds: Sequence[str], fmt: str = "boxed") -> PublishedScores:
    """MemAgent/ReMemR1 eval scoring of a final response (see the module docstring)."""
    if not golds:
        raise ValueError("at least one gold answer is required")
    text = (response or "").strip()
    answer = published_answer(after_think(text), fmt)
    if not answer:  # as the scripts test it: an answer of spaces counts as given (and then matches every gold)
        return PublishedScores(0.0, 0.0, 0.0, answer)
    gold = str(golds[0])
    pred, ref = normalize_answer(answer), normalize_answer(gold)
    # no guard for a gold that normalises to nothing ("the"): the scripts score it sub-EM 1 (contained in
    # every answer), and the papers' data keeps such golds, so their numbers include it
    sub = float(ref in pred or pred in ref)
    return PublishedScores(float(pred == ref), sub, round(f1_score(answer, gold), 2), answer)


def score_protocol(response: str | None, golds: Sequence[str], protocol: str, fmt: str = "boxed") -> dict[str, float]:
    """``{"em", "sub_em", "f1", "answered"}`` of one final response under ``protocol``."""
    if protocol == "memrl":
        answer = extract_answer(response, fmt)
        s: QAScores = score_answer(answer, list(golds))
        return {"em": s.em, "sub_em": s.sub_em, "f1": s.f1, "answered": float(answer is not None)}
    if protocol not in PROTOCOLS:
        raise ValueError(f"eval protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    p = score_published(response, golds, fmt)
    return {"em": p.em, "sub_em": p.sub_em, "f1": p.f1, "answered": float(p.answered)}


# MATH (Hendrycks) string normalisation used by MemAgent's reward: ordered (old, new) replacements.
_MATH_REPLACEMENTS = (
    ("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"), ("\\left", ""),
    ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", ""), ("\\%", ""), (" .", " 0."), ("{.", "{0."),
)


def math_normalize(text: str) -> str:
    """Hendrycks-MATH ``strip_string``-style cleanup, ending with every space removed."""
    for old, new in _MATH_REPLACEMENTS:
        text = text.replace(old, new)
    return text.replace(" ", "")


def memagent_strict_reward(response: str | None, golds: Sequence[str]) -> float:
    """MemAgent's training reward: 1.0 iff the boxed answer in the last 300 characters equals a gold.

    Both sides are lowercased and MATH-normalised (spaces removed), so ``\\boxed{New  York}``
    matches ``new york`` but ``\\boxed{New York City}`` does not. A box cut by the
    300-character window (its opening outside it) is not found and scores 0, as in the
    original.
    """
    if not response:
        return 0.0
    box = last_box(response[-300:].lower())  # the original's reading of the box (``\\boxed {x}`` reads "{x}")
    if box is None:
        return 0.0
    try:
        answer = box_content(box)
    except Unreadable:  # the original's reward catches its assertion and gives 0
        return 0.0
    got = math_normalize(answer)
    return float(any(got == math_normalize(str(g).lower()) for g in golds))
