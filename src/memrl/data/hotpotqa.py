"""Source multi-hop QA: the official HotpotQA schema (also used by 2WikiMultihopQA).

Record: ``_id, question, answer, supporting_facts=[[title, sent_id]], context=[[title, [sentences]]]``
(+ ``type``, ``level``). Accepted as a JSON array (the official files) or JSONL.
``answers`` (a list) is accepted instead of ``answer`` for datasets with several golds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memrl.data.errors import DataError, check_golds, string_list, type_name
from memrl.data.records import iter_records


@dataclass(frozen=True)
class Paragraph:
    """A titled paragraph; ``text`` is the sentences joined as HotpotQA stores them."""

    title: str
    text: str

    def render(self) -> str:
        """How a paragraph appears inside a document (MemAgent's layout: title line, text)."""
        return f"{self.title}\n{self.text}"


@dataclass
class QAExample:
    """A question with its own paragraphs and which of them are gold (supporting)."""

    id: str
    question: str
    answers: list[str]
    paragraphs: list[Paragraph]
    gold_titles: list[str]
    type: str | None = None
    level: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The title of every supporting fact (one per cited sentence, repeats kept): ReMemR1 counts
    # evidence per sentence, so a paragraph cited twice is two evidence entries there.
    fact_titles: list[str] = field(default_factory=list)

    @property
    def gold_paragraphs(self) -> list[Paragraph]:
        gold = set(self.gold_titles)
        return [p for p in self.paragraphs if p.title in gold]


def _req(rec: dict[str, Any], key: str, file: Path, row: int) -> Any:
    if key not in rec:
        raise DataError(file, row, key, "missing field")
    return rec[key]


def _answers(rec: dict[str, Any], file: Path, row: int, any_gold: bool = False) -> list[str]:
    """The gold answers: ``answer`` (one string, HotpotQA) or ``answers`` (a list, the FlashRAG copies);
    ``any_gold`` keeps one that normalises to nothing (a paper's script copies it unchecked)."""
    if "answer" in rec:
        answer = rec["answer"]
        if not isinstance(answer, str):
            raise DataError(file, row, "answer", f"expected a string, got {type_name(answer)}")
        return [answer] if any_gold else list(check_golds([answer], file, row, "answer", indexed=False))
    if "answers" in rec:
        answers = string_list(rec["answers"], file, row, "answers")
        if not any_gold:
            check_golds(answers, file, row, "answers", indexed=True)
        return list(answers)
    raise DataError(file, row, "answer", "missing field")


def _paragraphs(rec: dict[str, Any], file: Path, row: int) -> list[Paragraph]:
    """``context``: [title, sentences] pairs, each joined into one paragraph."""
    context = _req(rec, "context", file, row)
    if not isinstance(context, list):
        raise DataError(file, row, "context", f"expected a list of [title, sentences] pairs, got {type_name(context)}")
    if not context:
        raise DataError(file, row, "context", "empty: the question has no paragraphs")
    paragraphs: list[Paragraph] = []
    for j, item in enumerate(context):
        where = f"context[{j}]"
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise DataError(file, row, where, f"expected a [title, sentences] pair, got {type_name(item)}")
        title, sents = item
        if not isinstance(title, str):
            raise DataError(file, row, where + ".title", f"expected a string, got {type_name(title)}")
        if isinstance(sents, str):
            sents = [sents]
        if not isinstance(sents, list) or not all(isinstance(s, str) for s in sents):
            raise DataError(file, row, where + ".sentences", "expected a list of strings")
        paragraphs.append(Paragraph(title=title, text="".join(sents)))
    return paragraphs


def _fact_titles(rec: dict[str, Any], paragraphs: list[Paragraph], file: Path, row: int,
                 strict: bool) -> list[str]:
    """The title of each of ``supporting_facts``, in order; with ``strict`` each must be one of the paragraphs.

    ReMemR1's script skips a question that cites a title missing from its context instead of
    failing, so its protocol reads with ``strict=False`` and does the skipping itself.
    """
    facts = rec.get("supporting_facts", [])
    if not isinstance(facts, list):
        raise DataError(file, row, "supporting_facts", f"expected a list, got {type_name(facts)}")
    titles = {p.title for p in paragraphs}
    out: list[str] = []
    for j, fact in enumerate(facts):
        if not isinstance(fact, (list, tuple)) or not fact or not isinstance(fact[0], str):
            raise DataError(file, row, f"supporting_facts[{j}]", "expected a [title, sentence_id] pair")
        if strict and fact[0] not in titles:
            raise DataError(file, row, f"supporting_facts[{j}]", f"title {fact[0]!r} is not in context")
        out.append(fact[0])
    return out


def parse_hotpotqa_record(rec: dict[str, Any], file: Path, row: int, strict_facts: bool = True,
                          any_gold: bool = False) -> QAExample:
    """Validate one record; every problem names ``file:row:field``.

    ``gold_titles`` are the cited titles found in the context, each once, in first-cited order. ``any_gold``:
    a gold answer that normalises to nothing is kept (the papers' scripts keep it), not refused.
    """
    qid = rec.get("_id", rec.get("id", str(row)))
    question = _req(rec, "question", file, row)
    if not isinstance(question, str) or not question.strip():
        raise DataError(file, row, "question", f"expected a non-empty string, got {type_name(question)}")
    answers = _answers(rec, file, row, any_gold)
    paragraphs = _paragraphs(rec, file, row)
    fact_titles = _fact_titles(rec, paragraphs, file, row, strict_facts)
    titles = {p.title for p in paragraphs}
    gold_titles = [t for k, t in enumerate(fact_titles) if t in titles and t not in fact_titles[:k]]

    known = {"_id", "id", "question", "answer", "answers", "context", "supporting_facts", "type", "level"}
    return QAExample(
        id=str(qid),
        question=question,
        answers=list(answers),
        paragraphs=paragraphs,
        gold_titles=gold_titles,
        type=rec.get("type"),
        level=rec.get("level"),
        extra={k: v for k, v in rec.items() if k not in known},
        fact_titles=fact_titles,
    )


def read_hotpotqa(path: str | Path) -> Iterator[QAExample]:
    """Yield validated examples from a HotpotQA-schema JSON array or JSONL file."""
    p = Path(path)
    for row, rec in iter_records(p):
        yield parse_hotpotqa_record(rec, p, row)


def read_paragraph_pool(path: str | Path) -> Iterator[Paragraph]:
    """Extra distractor paragraphs: records with ``text`` (and optional ``title``).

    ``wiki_paragraphs.jsonl`` (``{title, paragraph, text}``) is of this shape;
    a HotpotQA-schema file also works (all its context paragraphs are used).
    """
    p = Path(path)
    for row, rec in iter_records(p):
        if "context" in rec and "question" in rec:
            yield from parse_hotpotqa_record(rec, p, row).paragraphs
            continue
        text = rec.get("text")
        if not isinstance(text, str):
            raise DataError(p, row, "text", f"expected a string, got {type_name(text)}")
        if not text.strip():
            raise DataError(p, row, "text", "empty paragraph")
        title = rec.get("title", "")
        if not isinstance(title, str):
            raise DataError(p, row, "title", f"expected a string, got {type_name(title)}")
        yield Paragraph(title=title, text=text)
