"""Data errors that point at the exact place in the input."""

from __future__ import annotations

from pathlib import Path

from memrl.io.errors import DataError  # data readers import it from here


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def check_golds(answers: list[str], file: str | Path, row: int, name: str, indexed: bool) -> list[str]:
    """Reject gold answers that score every prediction as correct.

    An empty gold (or one that normalises to nothing, such as ``"the"``) is contained in every
    answer, so sub-EM would reward anything boxed: a reward hack, not a label. ``name`` is the
    field as the file spells it (``answer``, ``answers``, ``reward_model.ground_truth``);
    ``indexed`` says whether it held a list, so the error can point at the element.
    """
    from memrl.rewards.qa import normalize_answer

    for j, answer in enumerate(answers):
        if not normalize_answer(answer):
            where = f"{name}[{j}]" if indexed else name
            why = "" if not answer.strip() else " after normalisation (lowercase, no punctuation or articles)"
            raise DataError(file, row, where, f"empty gold answer {answer!r}{why}: it would match every "
                            "prediction; fix or drop this row")
    return answers
