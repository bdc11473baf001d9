"""Knowledge-base retrieval for ``banking_knowledge``: BM25, regex grep and (optionally) dense embeddings,
ranked as τ³'s pipelines rank them.

* **BM25**: ``rank_bm25.BM25Okapi`` (τ³'s library, default k1=1.5, b=0.75, epsilon=0.25) over each
  document's content split on whitespace after lower-casing; the query is tokenised the same way.
  The top ``top_k`` (10) by score, ties in document order.
* **grep**: the pattern as a Python regex (case-insensitive unless ``case_sensitive``; a pattern
  that does not compile is searched literally) over each document's content; documents ranked by
  match count, ties in document order, top ``grep_top_k`` (10). The pattern is the agent's own, and a
  regex such as ``(.?){10}.{10}x`` backtracks for minutes over the knowledge base, holding the interpreter
  lock (τ³ would freeze a training run's every episode with it). So the search runs on the ``regex``
  package's engine (its Python-compatible ``VERSION0``: the same matches as ``re``), which can stop: past
  ``GREP_BUDGET_S`` seconds the tool fails with an error the agent reads.
* **dense**: cosine similarity between embeddings of the query and of each document's content,
  from a user-supplied embedder (``embedder: "package.module:function"``, ``texts -> (n, d)``
  array). τ³ calls OpenAI or OpenRouter models here; memrl makes no network calls, so dense
  retrieval runs only with your model and its rankings are not τ³'s.

Documents are read in file-name order. τ³ reads them in ``Path.glob`` order (what the file system
returns); order only decides ties and the layout of the full-KB prompt.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memrl.io.text_files import read_json


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    content: str


def load_documents(folder: Path) -> list[Document]:
    """Every ``*.json`` document of the knowledge base (``id``, ``title``, ``content``), by file name."""
    docs = []
    for path in sorted(folder.glob("*.json")):
        try:
            raw = read_json(path)
            docs.append(Document(str(raw["id"]), str(raw["title"]), str(raw["content"])))
        except (KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a knowledge-base document with id, title and content ({err})") from None
    if not docs:
        raise FileNotFoundError(f"{folder}: no knowledge-base documents (*.json)")
    return docs


def tokens(text: str) -> list[str]:
    """τ³'s BM25 tokenisation: lower-case, split on whitespace (punctuation stays on the word)."""
    return text.lower().split()


class Retriever:
    """A ranked search over the documents; ``search`` returns (document id, score), best first."""

    def __init__(self, docs: Sequence[Document], top_k: int = 10) -> None:
        self.docs = list(docs)
        self.top_k = top_k
        self.by_id = {d.id: d for d in self.docs}

    reranks = False  # whether the retriever reranks (a postprocessor in τ³'s pipeline)

    def search(self, query: str) -> list[tuple[str, float]]:
        raise NotImplementedError

    def search_timed(self, query: str) -> tuple[list[tuple[str, float]], float, float]:
        """(hits, retrieval ms, reranking ms), as τ³'s pipeline times them."""
        start = time.perf_counter()
        hits = self.search(query)
        return hits, (time.perf_counter() - start) * 1000, 0.0


class BM25Retriever(Retriever):
    def __init__(self, docs: Sequence[Document], top_k: int = 10) -> None:
        super().__init__(docs, top_k)
        try:
            from rank_bm25 import BM25Okapi
        except ImportError:
            raise ImportError("banking_knowledge's BM25 retrieval needs rank-bm25 (pip install rank-bm25)") from None
        self.index = BM25Okapi([tokens(d.content) for d in self.docs])

    def search(self, query: str) -> list[tuple[str, float]]:
        if not query or not query.strip():
            return []
        scores = self.index.get_scores(tokens(query))
        best = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[: min(self.top_k, len(self.docs))]
        return [(self.docs[i].id, float(scores[i])) for i in best]


GREP_BUDGET_S = 5.0  # one grep call over the whole knowledge base (a typical pattern takes milliseconds)


class GrepRetriever(Retriever):
    def __init__(self, docs: Sequence[Document], top_k: int = 10, case_sensitive: bool = False,
                 budget_s: float = GREP_BUDGET_S) -> None:
        super().__init__(docs, top_k)
        self.case_sensitive = case_sensitive
        self.budget_s = budget_s

    def search(self, query: str) -> list[tuple[str, float]]:
        if not query.strip():
            return []
        flags = 0 if self.case_sensitive else re.IGNORECASE
        try:
            re.compile(query, flags)  # τ³'s test of the pattern: one that Python's re refuses is taken literally
            source = query
        except re.error:
            source = re.escape(query)
        find = _stoppable(source, self.case_sensitive)
        deadline = time.monotonic() + self.budget_s
        hits = []
        for d in self.docs:
            try:
                found = find(d.content, max(deadline - time.monotonic(), 1e-3))
            except TimeoutError:
                raise TimeoutError(f"grep pattern {query!r} took over {self.budget_s:g} s on the knowledge base "
                                   "(it backtracks); use a simpler pattern") from None
            if found:
                hits.append((d.id, float(len(found))))
        hits.sort(key=lambda h: h[1], reverse=True)
        return hits[: self.top_k]


def _stoppable(source: str, case_sensitive: bool) -> Callable[[str, float], list[Any]]:
    """``findall(text, timeout)`` for a pattern ``re`` compiles: on ``regex``'s engine in its ``re``-compatible
    mode, which can stop; on ``re`` (unstoppable) for a pattern only ``re`` reads."""
    import regex

    try:
        pattern = regex.compile(source, regex.VERSION0 | (0 if case_sensitive else regex.IGNORECASE))
    except regex.error:
        plain = re.compile(source, 0 if case_sensitive else re.IGNORECASE)
        return lambda text, timeout: plain.findall(text)
    return lambda text, timeout: pattern.findall(text, timeout=timeout, concurrent=True)  # the GIL is let go


class DenseRetriever(Retriever):
    """Cosine similarity over embeddings from ``embed(texts) -> (n, d)`` (documents embedded once)."""

    def __init__(self, docs: Sequence[Document], embed: Callable[[list[str]], Any], top_k: int = 10) -> None:
        super().__init__(docs, top_k)
        self.embed = embed
        matrix = np.asarray(embed([d.content for d in self.docs]), dtype=np.float64)
        if matrix.shape[0] != len(self.docs):
            raise ValueError(f"embedder returned {matrix.shape[0]} vectors for {len(self.docs)} documents")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        self.matrix = matrix / np.where(norms == 0, 1, norms)

    def search(self, query: str) -> list[tuple[str, float]]:
        if not query or not query.strip():  # τ³'s query encoder refuses a blank query (the agent sees the error)
            raise ValueError("Empty or missing input for key 'query': cannot generate embedding from blank text.")
        embed_query = getattr(self.embed, "embed_query", None)  # an embedder that marks queries (Qwen's instruction)
        vec = np.asarray(embed_query(query) if embed_query else self.embed([query]), dtype=np.float64).reshape(-1)
        norm = np.linalg.norm(vec)
        scores = np.zeros(len(self.docs)) if norm == 0 else self.matrix @ (vec / norm)
        best = np.argsort(scores)[::-1][: min(self.top_k, len(self.docs))]
        return [(self.docs[i].id, float(scores[i])) for i in best]


def _listing(retriever: Retriever, hits: list[tuple[str, float]]) -> str:
    out = []
    for i, (doc_id, score) in enumerate(hits, 1):
        doc = retriever.by_id[doc_id]
        out.append(f"{i}. {doc.title or 'Untitled'}\n   ID: {doc_id}\n   Score: {score:.4f}\n   Content: {doc.content}\n")
    return "\n".join(out)


def kb_search_text(retriever: Retriever, query: str, k: int | None = None) -> str:
    """What τ³'s ``KB_search`` tools answer: the ranked documents in full, then the time it took."""
    hits, retrieval_ms, rerank_ms = retriever.search_timed(query)
    if k is not None:
        hits = hits[:k]
    body = _listing(retriever, hits) if hits else "No relevant documents found."
    # τ³ writes reranking= when its post-processing took > 0 ms, which its timer always reads (even with no reranker)
    return (f"{body}\n\n[Timing: retrieval={retrieval_ms:.0f}ms, reranking={rerank_ms:.0f}ms, "
            f"total={retrieval_ms + rerank_ms:.0f}ms]")


def grep_text(retriever: Retriever, pattern: str) -> str:
    """What τ³'s ``grep`` tool answers: the matching documents in full, by match count."""
    hits = retriever.search(pattern)
    return _listing(retriever, hits) if hits else f"No matches found for pattern: {pattern}"
