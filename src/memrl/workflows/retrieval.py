"""TF-IDF retrieval over an episode's earlier memories (ReMemR1's recall scorer).

Two scorers share one cosine (:func:`tfidf_cosines`): raw term counts times the
smoothed ``idf = ln((1 + N) / (1 + df)) + 1`` fitted on the memories only (a
query term no memory has weighs 0), compared by cosine. Dividing counts by the
document length, as some TF-IDF texts do, would not change a cosine.

* :class:`TfidfIndex` (``workflow.rememr1_variant=memrl``): lower-cased word
  terms; ``top1`` returns ``None`` when no memory shares a term with the query,
  because an empty recall is more honest than a random one.
* :class:`SubwordTfidfIndex` (``released``): what the public ReMemR1 code does.
  Terms are the *model tokenizer's* subword pieces of the lower-cased text with
  the byte-level space marker ``Ġ`` removed (so ``" paris"`` and ``"paris"``
  are one term; the newline piece ``Ċ`` stays a term). Identical memories are
  stored once (ReMemR1 keeps them in a set), and ``top1`` is a plain argmax with
  no threshold: it returns a memory even when every score is 0. Ties go to the
  most recently added memory; ReMemR1 takes the last of a reversed stable sort
  over its set's iteration order, which is hash-dependent, so its tie-break is
  arbitrary and this one is the deterministic reading of it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

_WORD = re.compile(r"\w+")
_SPACE_MARK = "\u0120"  # 'Ġ': byte-level BPE's leading-space marker


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def subword_terms(tokenizer: Any, text: str) -> list[str]:
    """ReMemR1's TF-IDF terms: subword pieces of ``text.lower()``, space marker removed."""
    return [piece.replace(_SPACE_MARK, "") for piece in tokenizer.tokenize(text.lower())]


def tfidf_cosines(query: Counter[str], docs: Sequence[Counter[str]]) -> list[float]:
    """Cosine of the query's TF-IDF vector with each document's (0 where either vector is empty)."""
    n = len(docs)
    df: Counter[str] = Counter()
    for d in docs:
        df.update(d.keys())
    idf = {w: math.log((1 + n) / (1 + f)) + 1.0 for w, f in df.items()}
    q = {w: c * idf[w] for w, c in query.items() if w in idf}
    qn = math.sqrt(sum(v * v for v in q.values()))
    out = []
    for d in docs:
        v = {w: c * idf[w] for w, c in d.items()}
        vn = math.sqrt(sum(x * x for x in v.values()))
        dot = sum(q[w] * v[w] for w in q.keys() & v.keys())
        out.append(dot / (qn * vn) if qn and vn else 0.0)
    return out


class TfidfIndex:
    """memrl's recall index: word terms, a hit needs a shared word."""

    def __init__(self) -> None:
        self.docs: list[Counter[str]] = []

    def add(self, text: str) -> int:
        self.docs.append(Counter(words(text)))
        return len(self.docs) - 1

    def __len__(self) -> int:
        return len(self.docs)

    def scores(self, query: str) -> list[float]:
        return tfidf_cosines(Counter(words(query)), self.docs)

    def top1(self, query: str) -> tuple[int, float] | None:
        s = self.scores(query)
        if not s or max(s) <= 0.0:
            return None
        best = max(range(len(s)), key=s.__getitem__)
        return best, s[best]


class SubwordTfidfIndex:
    """The released ReMemR1 recall index: subword terms, distinct texts, argmax without a threshold."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.texts: list[str] = []
        self.docs: list[Counter[str]] = []
        self._where: dict[str, int] = {}

    def add(self, text: str) -> int:
        """Position of ``text`` in the index; a text already present is not added again."""
        if text not in self._where:
            self._where[text] = len(self.texts)
            self.texts.append(text)
            self.docs.append(Counter(subword_terms(self.tokenizer, text)))
        return self._where[text]

    def __len__(self) -> int:
        return len(self.texts)

    def scores(self, query: str) -> list[float]:
        return tfidf_cosines(Counter(subword_terms(self.tokenizer, query)), self.docs)

    def top1(self, query: str | None) -> tuple[int, float] | None:
        """Best memory for ``query``; ``None`` only for no query, no memories, or memories without terms.

        The last case is where ReMemR1's vectorizer fails to fit (an empty vocabulary): its evaluation client
        then shows the text ``None`` (memrl's ``slot_fill=text``, released variant), its training code the
        "no memory recalled" placeholder (memrl otherwise).
        """
        if not query or not self.docs or not any(self.docs):
            return None
        s = self.scores(query)
        best = max(range(len(s)), key=lambda i: (s[i], i))
        return best, s[best]
