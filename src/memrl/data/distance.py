"""Where the evidence documents sit in a sample, and how far apart (ReMemR1's distance variants).

ReMemR1 measures a sample by the 0-based positions of its evidence (gold) documents in the
shuffled document list: ``evidence_idx`` lists them in supporting-fact order, ``min_distance`` is
the smallest gap between neighbouring positions once sorted, and ``is_ordered`` /
``is_reverse_ordered`` say whether the documents appear in supporting-fact order or exactly
backwards. Its ``_min_distance_{D}`` files keep the samples with ``min_distance >= D`` that are
also reverse-ordered: the reader meets the last hop first and has to look back to use it, which
is what revisitable memory is for.

ReMemR1 finds such samples by drawing many random layouts and filtering, so its variant files hold
whichever questions happened to qualify (none at all for small N). memrl places the evidence
instead: every question gets positions drawn uniformly from all layouts with gaps of at least D,
in the requested order, so a variant file holds the same questions as the plain one and a D that
N cannot hold is refused before anything is written.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

EvidenceOrder = Literal["any", "forward", "reverse"]
ORDERS: tuple[str, ...] = ("any", "forward", "reverse")


def documents_needed(evidence: int, min_distance: int) -> int:
    """Fewest documents that hold ``evidence`` documents with gaps of at least ``min_distance``."""
    return (evidence - 1) * min_distance + 1 if evidence > 1 else max(evidence, 1)


def check_min_distance(n: int, evidence: int, min_distance: int) -> None:
    """Refuse, in one line, a distance that ``n`` documents cannot hold for ``evidence`` gold documents."""
    need = documents_needed(evidence, min_distance)
    if n < need:
        raise ValueError(f"--min-distance {min_distance} cannot be met with --docs {n}: {evidence} evidence "
                         f"documents {min_distance} apart need at least {need} documents")


def spaced_positions(rng: random.Random, n: int, k: int, min_gap: int) -> list[int]:
    """``k`` sorted positions in ``range(n)``, neighbours at least ``min_gap`` apart, uniform over all such sets.

    Choosing ``k`` of ``n - (k-1)(min_gap-1)`` slots and widening the i-th by ``i*(min_gap-1)`` is a
    bijection onto the valid layouts, so no layout is favoured and nothing is retried.
    """
    if min_gap < 1:
        raise ValueError(f"min_gap must be >= 1, got {min_gap}")
    slots = n - (k - 1) * (min_gap - 1) if k else n
    if k > slots:
        raise ValueError(f"{k} positions {min_gap} apart do not fit in {n}")
    base = sorted(rng.sample(range(slots), k))
    return [b + i * (min_gap - 1) for i, b in enumerate(base)]


def place_evidence(rng: random.Random, docs: Sequence[int], evidence: Sequence[int], min_gap: int,
                   order: EvidenceOrder) -> list[int]:
    """``docs`` with the ``evidence`` ids (supporting-fact order) moved to spaced positions in ``order``.

    The other documents keep their relative order, so only the evidence layout changes.
    """
    wanted = set(evidence)
    rest = [d for d in docs if d not in wanted]
    positions = spaced_positions(rng, len(docs), len(evidence), min_gap)
    seq = list(evidence)
    if order == "reverse":
        seq.reverse()
    elif order == "any":
        rng.shuffle(seq)
    for pos, doc in zip(positions, seq):  # ascending positions: earlier inserts do not shift later ones
        rest.insert(pos, doc)
    return rest


def evidence_fields(docs: Sequence[int], evidence: Sequence[int]) -> dict[str, object]:
    """ReMemR1's per-sample record of the layout: ``evidence_idx``, ``min_distance``, ``is_(reverse_)ordered``.

    ``min_distance`` is None for a single evidence document (ReMemR1's script cannot compute one).
    """
    wanted = set(evidence)
    where = {d: i for i, d in enumerate(docs) if d in wanted}
    idx = [where[e] for e in evidence]
    ordered = sorted(idx)
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    return {"evidence_idx": idx, "min_distance": min(gaps) if gaps else None,
            "is_ordered": idx == ordered, "is_reverse_ordered": idx == ordered[::-1]}
