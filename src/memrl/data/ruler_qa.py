"""RULER's QA tasks: a real question among many numbered documents.

``qa_1`` is SQuAD (RULER and MemAgent's table use it): each answerable question brings
its own paragraph, then the other paragraphs of the same article, then random
paragraphs of the file, until the target length is filled. SQuAD is not shipped with
memrl: pass the official JSON (``train-v2.0.json``/``dev-v2.0.json`` or v1.1) with
``--squad FILE``. ``qa_2`` is HotpotQA in the official schema (``--hotpotqa FILE``):
the question's supporting paragraphs come first, then its own distractors, then
paragraphs of other questions and of ``--pool`` files. Documents are shuffled and
numbered ("Document 3:\\ntitle\\ntext"), as in memrl's RULER-HQA files, and the
sample records which document numbers hold the evidence (``gold_docs``).
Questions are taken in file order; a file with fewer questions than ``--samples``
gives fewer samples.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from memrl.data.errors import DataError
from memrl.data.hotpotqa import read_hotpotqa, read_paragraph_pool
from memrl.data.longctx import DOC_SEPARATOR, document_header
from memrl.data.ruler_base import Builder, RulerItem, RulerSources


@dataclass
class QAEntry:
    question: str
    answers: list[str]
    must: list[int]  # document ids that hold the evidence
    more: list[int] = field(default_factory=list)  # preferred fillers (same article / own distractors)


@dataclass
class QASource:
    entries: list[QAEntry]
    docs: list[str]


def _doc_ids(docs: list[str], index: dict[str, int], text: str) -> int:
    if text not in index:
        index[text] = len(docs)
        docs.append(text)
    return index[text]


def read_squad(path: str | Path) -> QASource:
    """Answerable questions of an official SQuAD JSON file (v1.1 or v2.0)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(p, None, None, f"not a readable SQuAD JSON file: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(p, None, "data", "expected SQuAD's {\"data\": [{title, paragraphs}]} layout")
    docs: list[str] = []
    index: dict[str, int] = {}
    entries: list[QAEntry] = []
    for a, article in enumerate(data["data"]):
        paragraphs = article.get("paragraphs") or []
        ids = [_doc_ids(docs, index, para["context"]) for para in paragraphs]
        for para, pid in zip(paragraphs, ids):
            for qa in para.get("qas") or []:
                if qa.get("is_impossible"):
                    continue
                golds = list(dict.fromkeys(ans["text"] for ans in qa.get("answers") or [] if ans.get("text")))
                if golds:
                    entries.append(QAEntry(qa["question"], golds, [pid], [i for i in ids if i != pid]))
    if not entries:
        raise DataError(p, None, "data", "no answerable questions found")
    return QASource(entries, docs)


def read_hotpot_source(path: str | Path, pool: tuple[str, ...] = ()) -> QASource:
    """HotpotQA-schema questions; every paragraph of every question (and of ``pool``) is a document."""
    docs: list[str] = []
    index: dict[str, int] = {}
    entries: list[QAEntry] = []
    for ex in read_hotpotqa(path):
        ids = [_doc_ids(docs, index, para.render()) for para in ex.paragraphs]
        gold = set(ex.gold_titles)
        must = [i for i, para in zip(ids, ex.paragraphs) if para.title in gold] or ids
        entries.append(QAEntry(ex.question, list(ex.answers), must, [i for i in ids if i not in must]))
    for extra in pool:
        for para in read_paragraph_pool(extra):
            _doc_ids(docs, index, para.render())
    if not entries:
        raise DataError(Path(path), None, None, "no questions found")
    return QASource(entries, docs)


@functools.lru_cache(maxsize=4)
def load_source(kind: str, path: str, pool: tuple[str, ...] = ()) -> QASource:
    """Read once per process: every length of a task shares the parsed file."""
    if kind == "squad":
        source = read_squad(path)
        if pool:
            index = {d: i for i, d in enumerate(source.docs)}
            for extra in pool:
                for para in read_paragraph_pool(extra):
                    _doc_ids(source.docs, index, para.render())
        return source
    return read_hotpot_source(path, pool)


def _source(kind: str, sources: RulerSources) -> QASource:
    path = sources.squad if kind == "squad" else sources.hotpotqa
    if path is None:
        flag = "--squad FILE (SQuAD's official JSON)" if kind == "squad" else "--hotpotqa FILE (HotpotQA schema)"
        raise ValueError(f"task {'qa_1' if kind == 'squad' else 'qa_2'} needs {flag}")
    return load_source(kind, str(path), tuple(sources.pool))


def qa_builder(kind: str, sources: RulerSources) -> Builder:
    """Question ``index`` of the source among ``size`` shuffled documents."""
    src = _source(kind, sources)

    def build(rng: random.Random, size: int, index: int) -> RulerItem:
        entry = src.entries[index % len(src.entries)]
        chosen = list(entry.must)
        taken = set(chosen)
        more = [i for i in entry.more if i not in taken]
        rng.shuffle(more)
        chosen += more[:max(0, size - len(chosen))]
        taken.update(chosen)
        need = size - len(chosen)
        if need > 0:
            others = rng.sample(range(len(src.docs)), min(len(src.docs), need + len(taken)))
            chosen += [i for i in others if i not in taken][:need]
        rng.shuffle(chosen)
        must = set(entry.must)
        context = DOC_SEPARATOR.join(document_header(n) + src.docs[d] for n, d in enumerate(chosen, start=1))
        gold_docs = [n for n, d in enumerate(chosen, start=1) if d in must]
        return RulerItem(context=context, question=entry.question, answers=list(entry.answers),
                         num_docs=len(chosen), gold_docs=gold_docs, meta={"dataset": kind})

    return build


def question_count(kind: str, sources: RulerSources) -> int:
    return len(_source(kind, sources).entries)


def doc_count(kind: str, sources: RulerSources) -> int:
    return len(_source(kind, sources).docs)
