import json
import re
import tracemalloc

import pytest

from memrl.data import DataError, plan_synthesis, read_hotpotqa, read_samples
from memrl.data.synth import parse_token_budget, train_file_name
from memrl.models.tiny import save_tokenizer
from tests.data.helpers import write_examples

HEADER = re.compile(r"(?:^|\n\n)Document (\d+):\n")


def _doc_numbers(context: str) -> list[int]:
    return [int(m) for m in HEADER.findall(context)]


def _check_file(path, source_examples, n):
    by_id = {e.id: e for e in source_examples}
    samples = list(read_samples(path))
    assert len(samples) == len(source_examples)
    for s in samples:
        ex = by_id[s.id]
        assert _doc_numbers(s.context) == list(range(1, n + 1))
        assert s.num_docs == n
        for p in ex.gold_paragraphs:
            assert p.render() in s.context
        # gold_docs points at the documents holding the gold paragraphs
        docs = re.split(r"(?:^|\n\n)Document \d+:\n", s.context)[1:]
        assert sorted(docs[k - 1] for k in s.gold_docs) == sorted(p.render() for p in ex.gold_paragraphs)
        assert len(set(docs)) == n  # no repeats
    return samples


def test_small_synthetic_file(tmp_path):
    src = write_examples(tmp_path / "q.json", n=6, n_para=4)
    examples = list(read_hotpotqa(src))
    plan = plan_synthesis(src, tmp_path / "out", [4, 10])
    reports = plan.run()
    assert [r.docs for r in reports] == [4, 10]
    s4 = _check_file(tmp_path / "out" / "eval_4.json", examples, 4)
    # with N=4 and question distractors on, the 4 documents are exactly the question's own
    for s in s4:
        ex = next(e for e in examples if e.id == s.id)
        assert sorted(re.split(r"(?:^|\n\n)Document \d+:\n", s.context)[1:]) == sorted(p.render() for p in ex.paragraphs)
    _check_file(tmp_path / "out" / "eval_10.json", examples, 10)


def test_without_question_distractors_only_gold_is_own(tmp_path):
    src = write_examples(tmp_path / "q.json", n=6, n_para=4)
    examples = {e.id: e for e in read_hotpotqa(src)}
    plan_synthesis(src, tmp_path / "o", [5], include_question_distractors=False).run()
    for s in read_samples(tmp_path / "o" / "eval_5.json"):
        own_nongold = [p.render() for p in examples[s.id].paragraphs if p.title not in examples[s.id].gold_titles]
        assert not any(p in s.context for p in own_nongold)


def test_deterministic_and_seed_dependent(tmp_path):
    src = write_examples(tmp_path / "q.json", n=6, n_para=4)
    plan_synthesis(src, tmp_path / "a", [12], seed=1).run()
    plan_synthesis(src, tmp_path / "b", [12], seed=1).run()
    plan_synthesis(src, tmp_path / "c", [12], seed=2).run()
    a, b, c = ((tmp_path / d / "eval_12.json").read_text() for d in "abc")
    assert a == b and a != c


def test_too_many_docs_fails_before_writing(tmp_path):
    src = write_examples(tmp_path / "q.json", n=6, n_para=4)  # pool of 24 paragraphs
    with pytest.raises(DataError, match=r"q\.json:1:context: --docs 25 needs 25 distinct paragraphs"):
        plan_synthesis(src, tmp_path / "out", [10, 25])
    assert not (tmp_path / "out").exists()
    with pytest.raises(DataError, match="fewer than this question's 2 gold"):
        plan_synthesis(src, tmp_path / "out", [1])


def test_allow_repeats(tmp_path):
    src = write_examples(tmp_path / "q.json", n=3, n_para=4)  # pool of 12
    plan_synthesis(src, tmp_path / "out", [30], allow_repeats=True).run()
    for s in read_samples(tmp_path / "out" / "eval_30.json"):
        assert _doc_numbers(s.context) == list(range(1, 31))
        assert s.num_docs == 30


def test_extra_pool_and_formats(tmp_path):
    src = write_examples(tmp_path / "q.json", n=2, n_para=4)
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({"title": f"W{i}", "text": f"wiki text {i}"}) + "\n" for i in range(40)))
    plan = plan_synthesis(src, tmp_path / "out", [30], pool_files=[pool], fmt="jsonl")
    plan.run()
    samples = list(read_samples(tmp_path / "out" / "eval_30.jsonl"))
    assert all(s.num_docs == 30 and "wiki text" in s.context for s in samples)


def test_train_file_respects_budget_with_exact_tokenizer(tmp_path):
    src = write_examples(tmp_path / "q.json", n=4, n_para=4)
    examples = list(read_hotpotqa(src))
    tok_path = save_tokenizer(tmp_path / "tok" / "tokenizer.json",
                              [p.render() for e in examples for p in e.paragraphs], 300)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    plan = plan_synthesis(src, tmp_path / "out", [], train_tokens=200, tokenizer=str(tok_path))
    (report,) = plan.run()
    assert report.path.endswith("train_200tok.parquet")
    samples = list(read_samples(report.path))
    exact = [len(tok.encode(s.context, add_special_tokens=False).ids) for s in samples]
    assert exact == report.token_counts  # the report is exact, not an estimate
    assert max(exact) <= 200
    for s, ex in zip(samples, examples):
        assert all(p.render() in s.context for p in ex.gold_paragraphs)
        assert s.num_docs == len(_doc_numbers(s.context))


def test_real_data_docs_50_200_400(tmp_path, hotpot_file):
    examples = list(read_hotpotqa(hotpot_file))
    plan = plan_synthesis(hotpot_file, tmp_path, [50, 200, 400])
    reports = plan.run()
    for n, r in zip([50, 200, 400], reports):
        samples = _check_file(tmp_path / f"eval_{n}.json", examples, n)
        assert r.num_samples == 53 and r.docs == n
        # gold positions differ between samples (MemAgent's fixed re-seed put them in one place)
        assert len({tuple(s.gold_docs) for s in samples}) > 40
    # more documents -> more tokens
    assert reports[0].tokens_mean < reports[1].tokens_mean < reports[2].tokens_mean


def test_streaming_memory_is_flat_in_context_length(tmp_path, hotpot_file, shared_data):
    """Peak Python allocations while writing barely grow from 400 to 3200 documents."""
    plan = plan_synthesis(hotpot_file, tmp_path, [400, 3200], pool_files=[shared_data / "wiki_paragraphs.jsonl"],
                          max_samples=2)
    peaks = []
    for n in plan.docs:
        tracemalloc.start()
        plan.synth.write_eval_file(n, tmp_path / f"e{n}.json")
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    size_3200 = (tmp_path / "e3200.json").stat().st_size
    assert peaks[1] < size_3200 / 4, (peaks, size_3200)  # far below one sample's text size


def test_budget_parsing():
    assert parse_token_budget("32k") == 32768
    assert parse_token_budget("28000") == 28000
    assert parse_token_budget("1M") == 1024 * 1024
    with pytest.raises(ValueError, match="token budget"):
        parse_token_budget("lots")
    assert train_file_name(32768) == "train_32k.parquet"
    assert train_file_name(28000) == "train_28k.parquet"
