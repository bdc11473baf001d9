"""Source questions resolved against one paragraph pool (the input of :mod:`memrl.data.synth`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memrl.data.hotpotqa import Paragraph, QAExample
from memrl.data.tokens import TokenCounter
from memrl.data.twowiki import read_multihop


class ParagraphPool:
    """All distinct paragraphs, each with a stable integer id and a cached token count."""

    def __init__(self) -> None:
        self.paragraphs: list[Paragraph] = []
        self._ids: dict[Paragraph, int] = {}
        self._tokens: dict[int, int] = {}

    def add(self, p: Paragraph) -> int:
        pid = self._ids.get(p)
        if pid is None:
            pid = len(self.paragraphs)
            self._ids[p] = pid
            self.paragraphs.append(p)
        return pid

    def __len__(self) -> int:
        return len(self.paragraphs)

    def tokens(self, pid: int, counter: TokenCounter) -> int:
        n = self._tokens.get(pid)
        if n is None:
            n = counter.count(self.paragraphs[pid].render())
            self._tokens[pid] = n
        return n


@dataclass
class Question:
    """A source example resolved against the pool."""

    row: int
    example: QAExample
    gold: list[int]
    own_distractors: list[int]

    @property
    def own(self) -> set[int]:
        return set(self.gold) | set(self.own_distractors)

    @property
    def evidence(self) -> list[int]:
        """Gold ids in supporting-fact order (the order ReMemR1's ``evidence_idx`` follows)."""
        rank = {t: i for i, t in enumerate(self.example.gold_titles)}
        titles = {pid: p.title for pid, p in zip(self.gold, self.example.gold_paragraphs)}
        return sorted(self.gold, key=lambda pid: rank[titles[pid]])


def load_questions(input_path: str | Path, pool: ParagraphPool,
                   max_samples: int | None = None) -> list[Question]:
    """Read source questions and register all their paragraphs in ``pool``.

    Every paragraph of the file enters the pool (also of questions past
    ``max_samples``) so distractors come from the whole file.
    """
    questions: list[Question] = []
    for row, ex in enumerate(read_multihop(input_path), start=1):
        gold_titles = set(ex.gold_titles)
        gold, own = [], []
        for p in ex.paragraphs:
            pid = pool.add(p)
            (gold if p.title in gold_titles else own).append(pid)
        if max_samples is None or len(questions) < max_samples:
            questions.append(Question(row=row, example=ex, gold=gold, own_distractors=own))
    return questions
