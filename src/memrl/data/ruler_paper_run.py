"""One run of a paper's RULER generator: one task at one length, as one process of the original.

The originals are scripts: each (task, length) is a fresh process that seeds Python's global
``random`` and NumPy's global generator with ``--random_seed`` at import, then draws from them
in program order, the search for the haystack size included (every probe draws its own keys,
positions and documents). Byte-identical samples therefore need the same draws in the same
order, so :class:`PaperRun` holds both generators and the families replay the scripts' calls
one for one. Several calls use a *fresh* ``random.Random(seed)`` instead (needle order, cwe's
word order, fwe's vocabulary, qa's document order): :meth:`PaperRun.fixed` gives that.

Token counts come from memrl's counter (``--tokenizer``): RULER's ``hf`` tokenizer counts
``tokenizer.tokenize(text)``, which is the same number as memrl's ``encode`` without special
tokens, so with the same tokenizer the sizes, and hence the draws, are the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memrl.data.ruler_paper_text import PaperText


class PaperLengthError(ValueError):
    """A target the original could not fill (its retry loop would spin forever)."""


@dataclass
class PaperInputs:
    """The files some tasks read: essays (niah essay haystack), cwe's extra words, the QA files."""

    essay: str | None = None
    english_words: str | None = None
    squad: str | None = None
    hotpotqa: str | None = None


@dataclass
class PaperRecord:
    """One sample: the original's record, plus what memrl's reader needs (context, question, documents)."""

    original: dict[str, Any]
    context: str
    question: str
    num_docs: int = 1
    gold_docs: list[int] = field(default_factory=list)


@dataclass
class PaperRun:
    """The state of one original process: its arguments, its two global RNGs, its tokenizer."""

    text: PaperText
    task: str
    length: int  # --max_seq_length
    seed: int  # --random_seed
    count: Callable[[str], int]
    inputs: PaperInputs
    py: random.Random = field(init=False)
    np: np.random.RandomState = field(init=False)

    def __post_init__(self) -> None:
        if self.task not in self.text.configs:
            raise ValueError(f"--tasks: {self.task!r} is not in {self.text.flavour.original.name}'s synthetic.yaml")
        self.py = random.Random(self.seed)
        self.np = np.random.RandomState(self.seed)

    @property
    def flavour(self) -> str:
        return self.text.flavour.name

    @property
    def family(self) -> str:
        return str(self.text.configs[self.task]["task"])

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.text.configs[self.task].get("args") or {})

    @property
    def base(self) -> dict[str, Any]:
        return self.text.tasks[self.family]

    @property
    def tokens_to_generate(self) -> int:
        return int(self.base["tokens_to_generate"])

    @property
    def answer_prefix(self) -> str:
        return str(self.base.get("answer_prefix", ""))

    @property
    def template(self) -> str:
        """``--template`` as the prepare script passes it (model template ``base``).

        RULER appends the answer prefix to the template and cuts it off the finished input;
        MemAgent passes the prefix separately (``--answer_prefix``).
        """
        task_template = str(self.base["template"])
        return task_template + self.answer_prefix if self.flavour == "ruler" else task_template

    def fixed(self) -> random.Random:
        """A fresh ``random.Random(--random_seed)``, as the scripts make for their fixed shuffles."""
        return random.Random(self.seed)

    def cut_answer_prefix(self, text: str) -> tuple[str, str]:
        """RULER's last step: find the first 10 characters of the prefix from the right, split there."""
        at = text.rfind(self.answer_prefix[:10])
        return text[:at], text[at:]


def binary_search(run: PaperRun, probe: Callable[[int], int], incremental: int, upper: int,
                  budget: int) -> int:
    """RULER HEAD's size search: the largest size in [incremental, upper] whose probe fits ``budget``.

    ``probe(size)`` builds a sample (drawing from the run's RNGs, as the original does on every
    probe) and returns its token count plus the answer room; no size fitting gives ``incremental``.
    """
    lower, best = incremental, None
    while lower <= upper:
        mid = (lower + upper) // 2
        if probe(mid) <= budget:
            best, lower = mid, mid + 1
        else:
            upper = mid - 1
    return best if best is not None else incremental


def retry_shrinking(make: Callable[[int], Any], size: int, incremental: int, what: str) -> Any:
    """The scripts' per-sample loop: build at ``size``; on any failure (too long, too few units) retry smaller.

    The original catches every exception and, once ``size`` is down to ``incremental``, retries
    the same size forever; memrl stops after enough identical failures with one line instead.
    """
    stuck = 0
    while True:
        try:
            return make(size)
        except Exception as exc:  # the original's bare except: the draws made before the failure stay made
            if size > incremental:
                size -= incremental
                continue
            stuck += 1
            if stuck >= 1000:
                raise PaperLengthError(f"{what}: no sample fits even at the smallest size ({exc}); the original "
                                       "would retry forever; choose a longer --lengths value") from None
