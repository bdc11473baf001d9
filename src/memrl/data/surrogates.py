"""Lone UTF-16 surrogates in input text: found before writing, reported as ``file:row:field``.

JSON allows ``"\\ud800"``, and Python decodes it into a string that cannot be encoded as UTF-8.
``memrl data synth`` used to find out only when writing the file that drew that paragraph (as a
``UnicodeEncodeError`` naming no row), after smaller eval files were already written. The
check is one regex pass over the text already in memory; the input is read a second time only
to name the row of an offending paragraph that no loaded question owns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from memrl.data.errors import DataError
from memrl.data.hotpotqa import Paragraph, read_paragraph_pool
from memrl.data.questions import ParagraphPool, Question

_SURROGATE = re.compile("[\ud800-\udfff]")


def _problem(text: str) -> str | None:
    m = _SURROGATE.search(text)
    if m is None:
        return None
    return (f"contains a lone surrogate (U+{ord(m.group()):04X} at character {m.start()}), which is not valid "
            "Unicode and cannot be written as UTF-8; fix or drop this row")


def _paragraph_problem(p: Paragraph) -> str | None:
    return _problem(p.title) or _problem(p.text)


def check_surrogates(source: str | Path, questions: Iterable[Question], pool: ParagraphPool,
                     pool_files: Iterable[str | Path] = ()) -> None:
    """Raise DataError naming the file, row and field of the first lone surrogate in the inputs."""
    questions = list(questions)
    for q in questions:
        ex = q.example
        for name, text in (("question", ex.question), *((f"answer[{j}]", a) for j, a in enumerate(ex.answers))):
            why = _problem(text)
            if why:
                raise DataError(source, q.row, name, why)
    bad = {pid for pid, p in enumerate(pool.paragraphs) if _paragraph_problem(p)}
    if not bad:
        return
    for q in questions:
        for pid in q.gold + q.own_distractors:
            if pid in bad:
                raise DataError(source, q.row, "context", str(_paragraph_problem(pool.paragraphs[pid])))
    _locate(source, pool_files)


def _locate(source: str | Path, pool_files: Iterable[str | Path]) -> None:
    """The offending paragraph belongs to no loaded question: read the inputs again to name its row."""
    from memrl.data.twowiki import read_multihop

    for row, ex in enumerate(read_multihop(source), start=1):
        for p in ex.paragraphs:
            why = _paragraph_problem(p)
            if why:
                raise DataError(source, row, "context", why)
    for extra in pool_files:
        for row, p in enumerate(read_paragraph_pool(extra), start=1):
            why = _paragraph_problem(p)
            if why:
                raise DataError(extra, row, "text", why)
