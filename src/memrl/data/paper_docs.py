"""What MemAgent's and ReMemR1's data generators share: the pool, the document draw, the JSON layout.

Both papers build a sample the same way (MemAgent ``taskutils/memory_data``, ReMemR1
``taskutils/data_synthesis/process_test.py``):

* the pool is every distinct ``title\\ntext`` paragraph of the input file, sorted as strings;
* a sample of N documents is the question's own paragraphs (all of them, gold and distractors,
  in context order) followed by ``random.sample`` of the other pool ids (ascending); N at or above
  the pool size takes the whole pool instead;
* the documents are then reordered by one fixed permutation, ``random.Random(4).shuffle`` of a
  list of that length, so every sample of size N puts its question's paragraphs in the same slots;
* the context is the documents numbered with the repository's document template, joined by a blank line;
* files are ``json.dump(records, ensure_ascii=False, indent=4)``.

The draws happen in process-pool workers (their ``utils.TqdmExecutor``), and Python reseeds the module
RNG from OS entropy in every forked child (``random`` registers ``seed()`` with ``os.register_at_fork``):
the scripts' ``random.seed(42)`` never reaches them, so no run of the scripts, the authors' included,
repeats its documents. What is deterministic there (the pool, which question each record holds, the
fixed permutation, the whole-pool samples, the layout) memrl reproduces exactly; the distractor draws
use :func:`worker_rng`, one seeded RNG per size, with the same ``random`` calls on the same lists.
This module has none of the papers' text: the template comes from the user's checkout
(:mod:`memrl.data.originals`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import IO, Any

from memrl.data.errors import DataError
from memrl.data.hotpotqa import Paragraph, QAExample
from memrl.data.longctx import DOC_SEPARATOR


@dataclass
class PaperQuestion:
    """A question as the papers' scripts hold it: its position and the pool ids of all its paragraphs."""

    index: int
    row: int
    example: QAExample
    own: list[int]


class PaperPool:
    """The sorted distinct paragraphs, and the order MemAgent's in-place shuffles have left them in.

    MemAgent's generator shuffles its global pool list itself (``random.Random(4).shuffle(DOCS)``)
    whenever N reaches the pool size, and later samples of that size index that shuffled list;
    ``order[i]`` is the paragraph now at position ``i``. It shuffles a worker's copy, and each size
    starts new workers from the parent's unshuffled list (:meth:`reset`), so with one worker the k-th
    whole-pool sample of a size sees k+1 shuffles. ReMemR1 never mutates its pool.
    """

    def __init__(self, paragraphs: Iterable[Paragraph]) -> None:
        self.texts: list[str] = sorted({p.render() for p in paragraphs})
        self._ids = {t: i for i, t in enumerate(self.texts)}
        self.order: list[int] = list(range(len(self.texts)))

    def __len__(self) -> int:
        return len(self.texts)

    def ids(self, paragraphs: Sequence[Paragraph]) -> list[int]:
        """Pool ids of ``paragraphs`` in their order (repeats kept, as the scripts keep them)."""
        return [self._ids[p.render()] for p in paragraphs]

    def text(self, position: int) -> str:
        """The paragraph at ``position`` of the pool list as it stands now."""
        return self.texts[self.order[position]]

    def reset(self) -> None:
        """The pool list as the parent process holds it (sorted): what a size's fresh workers start from."""
        self.order = list(range(len(self.texts)))

    def shuffle_in_place(self) -> None:
        """MemAgent's ``random.Random(4).shuffle(DOCS)`` of the whole pool list."""
        perm = fixed_permutation(len(self.order))
        self.order = [self.order[p] for p in perm]


def worker_rng(paper: str, seed: int, n: int) -> random.Random:
    """The RNG of size N's document draws: fixed per (paper, seed, N), so a file does not depend on which
    other sizes were asked for. The scripts' own draws are unseeded (see the module docstring)."""
    return random.Random(f"{paper}:{seed}:{n}")


@lru_cache(maxsize=64)
def fixed_permutation(n: int) -> tuple[int, ...]:
    """``random.Random(4).shuffle`` of ``range(n)``: the same swaps move any list of length n the same way."""
    perm = list(range(n))
    random.Random(4).shuffle(perm)
    return tuple(perm)


def check_own_fits(questions: Sequence[PaperQuestion], n: int, pool_size: int, source: str) -> None:
    """Refuse an N below a question's own paragraph count (the scripts crash in ``random.sample`` there)."""
    if n >= pool_size:
        return
    for q in questions:
        if n < len(q.own):
            raise DataError(source, q.row, "context",
                            f"--docs {n} is fewer than this question's {len(q.own)} paragraphs, which the "
                            "papers' generators always include")


def draw_positions(rng: random.Random, pool_size: int, own: Sequence[int], n: int) -> list[int] | None:
    """Pool positions of a sample's documents before the fixed permutation; ``None`` means the whole pool.

    The same ``rng.sample`` call on the same population list as the originals: from the same RNG state,
    the same draw.
    """
    if n >= pool_size:
        return None
    if n - len(own) > 0:
        taken = set(own)
        others = [i for i in range(pool_size) if i not in taken]
        return list(own) + rng.sample(others, max(0, n - len(own)))
    return list(own) + rng.sample([], n - len(own))


def permuted(items: Sequence[Any]) -> list[Any]:
    """``items`` reordered as ``random.Random(4).shuffle`` reorders a list of that length."""
    return [items[p] for p in fixed_permutation(len(items))]


def render_context(template: str, documents: Sequence[str]) -> str:
    """The numbered documents: the repository's template filled with ``i`` (1-based) and ``document``."""
    return DOC_SEPARATOR.join(template.format(i=k + 1, document=d) for k, d in enumerate(documents))


class JsonArrayWriter:
    """Writes a list one record at a time, byte-identical to ``json.dump(list, fh, ensure_ascii=False, indent=4)``.

    The scripts hold every record (contexts of up to millions of tokens) in memory and dump the list;
    one record at a time gives the same bytes with one context in memory.
    """

    def __init__(self, fh: IO[str]) -> None:
        self.fh = fh
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        item = json.dumps([record], ensure_ascii=False, indent=4)[2:-2]  # "[\n" + item + "\n]"
        self.fh.write(("[\n" if not self.count else ",\n") + item)
        self.count += 1

    def close(self) -> None:
        self.fh.write("\n]" if self.count else "[]")
