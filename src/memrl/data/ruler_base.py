"""Types shared by the RULER-style task families (NIAH, tracking/aggregation, QA)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memrl.data.ruler_text import EssaySource


@dataclass
class RulerItem:
    """One generated sample before it becomes a :class:`LongContextSample`.

    ``context`` is what the agent reads chunk by chunk; ``question`` is asked separately
    (MemAgent puts it in every conversation), so neither RULER's instruction preamble nor
    its answer prefix is part of the context.
    """

    context: str
    question: str
    answers: list[str]
    num_docs: int = 1
    gold_docs: list[int] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


# (rng, size, index) -> item. ``size`` counts haystack units (sentences, passages, list
# entries, words or documents, depending on the task) and is what the length fit searches;
# more units must never mean fewer tokens. ``index`` picks the source question for QA.
Builder = Callable[[random.Random, int, int], RulerItem]


@dataclass
class RulerSources:
    """Inputs some tasks need: prose for the essay haystack, QA files for qa_1/qa_2."""

    essay: EssaySource = field(default_factory=EssaySource)
    squad: str | None = None
    hotpotqa: str | None = None
    pool: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TaskSpec:
    """A RULER task: how to build samples, how to score them, how much room the answer needs.

    ``answer_tokens`` is RULER's ``tokens_to_generate`` for the task: the generation room kept
    free when a sample is filled to its target length.
    """

    name: str
    family: str
    metric: str
    answer_tokens: int
    make: Callable[[int, RulerSources], Builder]  # (target length, sources) -> builder
    min_size: int = 1
    max_size: Callable[[RulerSources], int | None] = lambda sources: None
    description: str = ""
