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


def string_list(value: object, file: str | Path, row: int, name: str) -> list[str]:
    """A non-empty JSON list of strings; else the error names the element to fix (``answers[0]``: a number,
    common in converted datasets) or says the list is empty."""
    if not isinstance(value, list):
        raise DataError(file, row, name, f"expected a non-empty list of strings, got {type_name(value)}")
    if not value:
        raise DataError(file, row, name, "empty list: a row needs at least one gold answer")
    for j, item in enumerate(value):
        if not isinstance(item, str):
            raise DataError(file, row, f"{name}[{j}]", "expected a string, got " + ("null" if item is None else f"{type_name(item)} {item!r}"))
    return list(value)
