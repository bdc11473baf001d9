"""TF-IDF retrieval over an episode's earlier memories (ReMemR1's recall scorer).

Documents and queries are lower-cased word tokens. Weights are
``tf * idf`` with ``tf = count / length`` and the smoothed
``idf = ln((1 + N) / (1 + df)) + 1``; similarity is cosine. ``top1`` returns the
best match, or ``None`` when no memory shares a word with the query (an
empty recall is more honest than a random one).
"""

from __future__ import annotations

import math
import re
from collections import Counter

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class TfidfIndex:
    """A tiny in-memory index; episodes hold at most a few hundred memories."""

    def __init__(self) -> None:
        self.docs: list[Counter[str]] = []

    def add(self, text: str) -> int:
        self.docs.append(Counter(words(text)))
        return len(self.docs) - 1

    def __len__(self) -> int:
        return len(self.docs)

    def _vector(self, counts: Counter[str], idf: dict[str, float]) -> dict[str, float]:
        total = sum(counts.values()) or 1
        return {w: (c / total) * idf.get(w, 0.0) for w, c in counts.items()}

    def scores(self, query: str) -> list[float]:
        n = len(self.docs)
        df: Counter[str] = Counter()
        for d in self.docs:
            df.update(d.keys())
        idf = {w: math.log((1 + n) / (1 + f)) + 1.0 for w, f in df.items()}
        q = self._vector(Counter(words(query)), idf)
        qn = math.sqrt(sum(v * v for v in q.values()))
        out = []
        for d in self.docs:
            v = self._vector(d, idf)
            dot = sum(q[w] * v[w] for w in q.keys() & v.keys())
            vn = math.sqrt(sum(x * x for x in v.values()))
            out.append(dot / (qn * vn) if qn and vn else 0.0)
        return out

    def top1(self, query: str) -> tuple[int, float] | None:
        s = self.scores(query)
        if not s or max(s) <= 0.0:
            return None
        best = max(range(len(s)), key=s.__getitem__)
        return best, s[best]
