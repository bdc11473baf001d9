"""Evidence placement for ReMemR1's distance variants: valid, unbiased, recorded as ReMemR1 records it."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from memrl.data import plan_synthesis, read_samples
from memrl.data.distance import (
    check_min_distance,
    documents_needed,
    evidence_fields,
    place_evidence,
    spaced_positions,
)
from tests.data.helpers import write_examples


def test_spaced_positions_reach_every_valid_layout_evenly():
    n, k, gap = 8, 3, 3
    valid = {c for c in itertools.combinations(range(n), k) if all(b - a >= gap for a, b in zip(c, c[1:]))}
    rng = random.Random(0)
    seen = Counter(tuple(spaced_positions(rng, n, k, gap)) for _ in range(4000))
    assert set(seen) == valid  # nothing invalid, nothing missing
    expected = 4000 / len(valid)
    assert all(0.7 * expected < c < 1.3 * expected for c in seen.values())


def test_place_evidence_keeps_the_other_documents_in_order():
    rng = random.Random(3)
    docs = list(range(100))
    evidence = [40, 7, 66]
    out = place_evidence(rng, docs, evidence, 30, "reverse")
    assert sorted(out) == docs
    assert [d for d in out if d not in evidence] == [d for d in docs if d not in evidence]
    fields = evidence_fields(out, evidence)
    assert fields["is_reverse_ordered"] and not fields["is_ordered"] and fields["min_distance"] >= 30
    assert [out[i] for i in fields["evidence_idx"]] == evidence


def test_distance_arithmetic_and_refusal():
    assert documents_needed(2, 100) == 101 and documents_needed(4, 10) == 31 and documents_needed(1, 50) == 1
    check_min_distance(101, 2, 100)
    with pytest.raises(ValueError, match="--min-distance 100 cannot be met with --docs 100"):
        check_min_distance(100, 2, 100)


def test_plain_files_record_evidence_positions_and_are_unchanged_in_layout(tmp_path):
    """Without a distance the evidence stays where the shuffle put it; the fields describe that layout."""
    src = write_examples(tmp_path / "q.json", n=8, n_para=4)
    plan = plan_synthesis(src, tmp_path / "out", [30])
    plan.run()
    for s in read_samples(tmp_path / "out" / "eval_30.json"):
        idx = s.extra["evidence_idx"]
        assert sorted(i + 1 for i in idx) == s.gold_docs
        assert s.extra["min_distance"] == min(abs(a - b) for a, b in itertools.combinations(idx, 2))


def test_distance_and_train_budget_do_not_mix(tmp_path):
    src = write_examples(tmp_path / "q.json")
    with pytest.raises(ValueError, match="leave out --train-tokens"):
        plan_synthesis(src, tmp_path / "out", [20], train_tokens=2000, min_distance=3)
