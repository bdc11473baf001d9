"""RULER's QA tasks (``qa.py``): SQuAD (qa_1) and HotpotQA (qa_2) among numbered documents, replayed.

The document pool is every distinct paragraph of the file, sorted (HotpotQA: ``title\\ntext``
with the sentences joined; SQuAD: the paragraph), and a question's own documents are all its
paragraphs (HotpotQA's gold and distractors alike; SQuAD's one paragraph, then the article's
others). The document order is one fixed permutation: a fresh ``Random(seed)`` shuffles every
sample's list, so at one document count the question's own documents always land in the same
slots. One document count serves a whole length (RULER: a binary search on question 0; MemAgent:
an estimate from 1000 documents, then steps); filler documents are drawn from the global
``random``. Question ``i`` of the file is sample ``i`` (plus ``--pre_samples`` in chunked runs).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from memrl.data.ruler_paper_run import PaperLengthError, PaperRecord, PaperRun, binary_search, retry_shrinking
from memrl.io.text_files import read_json_or_lines


@dataclass(frozen=True)
class PaperQA:
    """The original's ``QAS, DOCS``: questions with their document ids, and the sorted documents."""

    questions: tuple[dict[str, Any], ...]
    docs: tuple[str, ...]


def _load_json(path: str) -> Any:
    return read_json_or_lines(path)  # JSONL too, as memrl's own HotpotQA files may be


@functools.lru_cache(maxsize=4)
def read_hotpotqa(path: str) -> PaperQA:
    """HotpotQA (official schema) as the originals read it."""
    data = _load_json(path)
    docs = sorted({f"{t}\n{''.join(p)}" for d in data for t, p in d["context"]})
    ids = {c: i for i, c in enumerate(docs)}
    qas = tuple({"query": d["question"], "outputs": [d["answer"]],
                 "context": [ids[f"{t}\n{''.join(p)}"] for t, p in d["context"]],
                 "supporting": sorted({t for t, _ in d.get("supporting_facts") or []}),
                 "titles": [t for t, _ in d["context"]]} for d in data)
    return PaperQA(qas, tuple(docs))


@functools.lru_cache(maxsize=4)
def read_squad(path: str) -> PaperQA:
    """SQuAD v2.0 JSON as the originals read it (unanswerable questions dropped; v1.1 has none)."""
    data = _load_json(path)
    docs = sorted({p["context"] for d in data["data"] for p in d["paragraphs"]})
    ids = {c: i for i, c in enumerate(docs)}
    qas = []
    for d in data["data"]:
        more = [ids[p["context"]] for p in d["paragraphs"]]
        for p in d["paragraphs"]:
            own = ids[p["context"]]
            for qa in p["qas"]:
                if not qa.get("is_impossible", False):
                    qas.append({"query": qa["question"], "outputs": [a["text"] for a in qa["answers"]],
                                "context": [own], "more_context": [i for i in more if i != own]})
    return PaperQA(tuple(qas), tuple(docs))


class QARun:
    def __init__(self, run: PaperRun) -> None:
        self.run = run
        dataset = str(run.args.get("dataset"))
        path = run.inputs.squad if dataset == "squad" else run.inputs.hotpotqa
        if path is None:
            flag = "--squad FILE (SQuAD v2.0 JSON)" if dataset == "squad" else "--hotpotqa FILE (HotpotQA JSON)"
            raise ValueError(f"task {run.task} needs {flag}")
        self.qa = read_squad(path) if dataset == "squad" else read_hotpotqa(path)

    def generate(self, index: int, num_docs: int) -> dict[str, Any]:
        """The original's ``generate_input_output(index, num_docs)``; ``order`` = document ids in slot order."""
        run, docs = self.run, self.qa.docs
        q = self.qa.questions[index]
        own, more = list(q["context"]), list(q.get("more_context", []))
        if num_docs < len(docs):
            if num_docs - len(own) > len(more):
                taken = set(own + more)
                extra = [i for i in range(len(docs)) if i not in taken]
                order = own + more + run.py.sample(extra, max(0, num_docs - len(own) - len(more)))
            else:
                order = own + run.py.sample(more, num_docs - len(own))
        elif run.flavour == "ruler":  # HEAD repeats the pool; MemAgent takes it once
            order = (list(range(len(docs))) * ((num_docs + len(docs) - 1) // len(docs)))[:num_docs]
        else:
            order = list(range(len(docs)))
        run.fixed().shuffle(order)  # a shuffle's permutation depends only on the length: ids stand for texts
        context = "\n\n".join(run.text.document.format(i=i + 1, document=docs[d]) for i, d in enumerate(order))
        if run.flavour == "ruler":
            text = run.template.format(context=context, query=q["query"])
        else:
            text = run.template.format(query=q["query"])
        return {"input": text, "context": context, "outputs": q["outputs"], "order": order, "question": q}

    def gold_docs(self, s: dict[str, Any]) -> list[int]:
        """1-based slots of the question's supporting paragraphs (HotpotQA) or own paragraph (SQuAD)."""
        q = s["question"]
        if "supporting" in q:
            wanted = {d for d, t in zip(q["context"], q["titles"]) if t in q["supporting"]}
        else:
            wanted = set(q["context"])
        return [n for n, d in enumerate(s["order"], start=1) if d in wanted]


def _head_size(qr: QARun) -> int:
    run, inc, ttg = qr.run, 10, qr.run.tokens_to_generate
    per_doc = run.count(qr.generate(0, inc)["input"]) / inc
    upper = max(int((run.length / per_doc) * 3), inc * 2)
    return binary_search(run, lambda n: run.count(qr.generate(0, n)["input"]) + ttg, inc, upper, run.length)


def _memagent_probe(qr: QARun, num_docs: int) -> int:
    s = qr.generate(0, num_docs)
    return qr.run.count(s["input"] + f" {s['outputs']}" + s["context"])


def _memagent_size(qr: QARun) -> int:
    """MemAgent's search: estimate from 1000 documents, jump by 90% of the gap, then steps of 10."""
    run, ttg, inc, pool = qr.run, qr.run.tokens_to_generate, 10, len(qr.qa.docs)
    num_docs = int((run.length * 0.8) / (_memagent_probe(qr, 1000) / 1000))
    linear, total = True, 0
    for _ in range(100_000):
        total = _memagent_probe(qr, num_docs)
        current, per_doc = total + ttg, total / num_docs
        if current > run.length:
            num_docs -= int((current - run.length) / per_doc)
            continue
        if num_docs >= pool:
            num_docs, linear = pool, False
            break
        if run.length - current < 10000:
            break
        add = int((run.length - current) * 0.9 / per_doc)
        num_docs += add
        if add < 1:
            linear = False
            break
        num_docs = min(num_docs, pool)
    else:
        raise PaperLengthError(f"{run.task}: MemAgent's document search does not settle at {run.length} tokens")
    while linear and total + ttg < run.length:
        total = _memagent_probe(qr, num_docs)
        if total + ttg > run.length:
            num_docs -= inc
            break
        num_docs += inc
        if num_docs > pool:
            num_docs = pool
            break
    return num_docs


def qa_records(run: PaperRun, samples: int, pre_samples: int = 0) -> list[PaperRecord]:
    """At most as many samples as the file has questions (the original would loop forever past them)."""
    qr = QARun(run)
    samples = min(samples, len(qr.qa.questions) - pre_samples)
    ttg = run.tokens_to_generate
    size = _head_size(qr) if run.flavour == "ruler" else _memagent_size(qr)
    out = []
    for index in range(samples):
        def make(n: int) -> tuple[dict[str, Any], int]:
            s = qr.generate(index + pre_samples, n)
            length = run.count(s["input"]) + ttg if run.flavour == "ruler" else 0
            if length > run.length:
                raise ValueError(f"{length} exceeds max_seq_length.")
            return s, length

        s, length = retry_shrinking(make, size, 10, run.task)
        gold = qr.gold_docs(s)
        if run.flavour == "ruler":
            text, prefix = run.cut_answer_prefix(s["input"])
            rec = {"index": index, "input": text, "outputs": s["outputs"], "length": length,
                   "length_w_model_temp": length, "answer_prefix": prefix}
            question = text.replace(s["context"], "", 1)
        else:
            rec = {"index": index, "input": s["input"], "context": s["context"], "outputs": s["outputs"],
                   "answer_prefix": run.answer_prefix}
            question = s["input"]
        out.append(PaperRecord(rec, s["context"], question, num_docs=len(s["order"]), gold_docs=gold))
    return out
