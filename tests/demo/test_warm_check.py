"""The warm-start check (memrl_demo.warm_check): which turns it scores, what it computes, and the demo's extra rounds."""

import json
from types import SimpleNamespace

import pytest
import torch

from memrl.config.schema import WorkflowConfig
from memrl.models.tiny import build_hf_tokenizer
from memrl_demo.needle import CODES, make_split, tokenizer_corpus
from memrl_demo.run import WARM_REPORT, WORKFLOW
from memrl_demo.warm_check import MIN_SHARE, _turns, code_ids, describe, skill_scores, weakest


OPTS = WorkflowConfig(**WORKFLOW).opts


@pytest.fixture(scope="module")
def tok():
    return build_hf_tokenizer(tokenizer_corpus(), 600)


class CodeModel(torch.nn.Module):
    """Writes the last code its input mentions (``swap`` maps one code's token to another's), else token 0."""

    def __init__(self, tok, swap=None, vocab=600):
        super().__init__()
        self.ids, self.vocab = list(code_ids(tok).values()), vocab
        self.swap = {self.ids[CODES.index(a)]: self.ids[CODES.index(b)] for a, b in (swap or {}).items()}

    def forward(self, input_ids):
        seen = [t for t in input_ids[0].tolist() if t in self.ids]
        logits = torch.zeros(1, input_ids.shape[1], self.vocab)
        target = self.swap.get(seen[-1], seen[-1]) if seen else 0
        logits[0, -1, target] = 20.0
        return SimpleNamespace(logits=logits)


def test_every_turn_where_the_teacher_writes_a_code_is_scored_once(tok):
    docs = make_split(5, 12, (2, 5))
    turns = _turns(tok, docs, OPTS)
    ids = code_ids(tok)
    kinds = [t[0] for t in turns]
    for skill, code, tokens, pos in turns:
        assert tokens[pos] == ids[code]
        needle = tok.encode(" is " + code, add_special_tokens=False)
        prompt = tokens[:pos]
        has_needle = any(prompt[i:i + len(needle)] == needle for i in range(len(prompt)))
        assert has_needle == (skill == "read") or skill == "answer"
    # one needle read per document that the chunking did not split, one answer each, carries between
    assert 0 < kinds.count("read") == kinds.count("answer") <= len(docs) and kinds.count("carry") > 0


def test_a_model_that_always_copies_the_code_passes(tok):
    scores = skill_scores(CodeModel(tok), tok, OPTS, seed=1, docs=12)
    assert all(v == pytest.approx(1.0) for s in ("read", "carry", "answer") for v in scores[s].values())
    assert set(scores["read"]) == set(CODES) and scores["keep"] == pytest.approx(1.0, abs=1e-4)
    assert weakest(scores) is None and describe(scores).startswith("lowest code share: read 1.00, carry 1.00")


def test_two_confused_codes_fail_the_check(tok):
    scores = skill_scores(CodeModel(tok, swap={"violet": "copper"}), tok, OPTS, seed=1, docs=12)
    assert scores["read"]["violet"] == pytest.approx(0.0, abs=1e-6) and scores["read"]["copper"] == pytest.approx(1.0)
    skill, code, share = weakest(scores)
    assert code == "violet" and share < MIN_SHARE


def test_a_model_that_never_keeps_a_code_fails_on_keep(tok):
    scores = {"read": {c: 1.0 for c in CODES}, "carry": {c: 0.95 for c in CODES},
              "answer": {c: 1.0 for c in CODES}, "keep": 0.02}
    assert weakest(scores) == ("keep", "", 0.02)


def test_the_demo_runs_extra_rounds_while_the_check_fails(small_demo):
    """SMALL's warm start (two passes of 24 one-chunk documents) is far from passing; it allows one extra round."""
    out, summary = small_demo
    report = json.loads((out / "sft_model" / WARM_REPORT).read_text())
    assert report["extra_rounds"] == 1 and report["passed"] is False
    assert summary["warm_start_extra_rounds"] == 1
    assert set(report["scores"]) == {"read", "carry", "answer", "keep"}
