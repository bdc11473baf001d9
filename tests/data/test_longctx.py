import json

import pyarrow.parquet as pq
import pytest

from memrl.data import DataError, LongContextSample, SampleWriter, read_samples, write_samples


def _samples():
    return [
        LongContextSample(index=i, question=f"q{i}? \"quoted\" ü", answers=[f"a{i}", "alt"],
                          context=f"Document 1:\nT\nline with \"quotes\" and \\ backslash {i}\n\nDocument 2:\nU\nx",
                          num_docs=2, id=f"id{i}", gold_docs=[1], extra={"type": "bridge"})
        for i in range(3)
    ]


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
@pytest.mark.parametrize("schema", ["eval", "train"])
def test_roundtrip_every_format_and_schema(tmp_path, fmt, schema):
    path = tmp_path / f"f.{fmt}"
    assert write_samples(_samples(), path, schema=schema, fmt=fmt) == 3
    back = list(read_samples(path))
    for a, b in zip(_samples(), back):
        assert (b.index, b.question, b.answers, b.context, b.num_docs, b.gold_docs) == \
               (a.index, a.question, a.answers, a.context, a.num_docs, a.gold_docs)


def test_eval_json_is_memagent_layout(tmp_path):
    path = tmp_path / "eval_2.json"
    write_samples(_samples(), path)
    data = json.loads(path.read_text())  # one JSON array, like eval_{N}.json
    assert set(data[0]) >= {"context", "input", "answers", "num_docs", "index"}
    assert data[0]["input"].startswith("q0?")


def test_train_parquet_is_verl_layout(tmp_path):
    path = tmp_path / "train.parquet"
    write_samples(_samples(), path, schema="train")
    row = pq.read_table(path).to_pylist()[0]
    assert row["prompt"] == [{"role": "user", "content": row["extra_info"]["question"]}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": ["a0", "alt"]}
    assert row["ability"] == "memory" and row["data_source"] == "hotpotqa"
    assert row["extra_info"]["num_docs"] == 2


def test_streamed_pieces_equal_whole_context(tmp_path):
    s = _samples()[0]
    path = tmp_path / "s.jsonl"
    with SampleWriter(path) as w:
        w.write(s, iter(["Document 1:\n", "T\nline", ' "x" \\ ', "end"]))
    assert next(read_samples(path)).context == 'Document 1:\nT\nline "x" \\ end'


def test_crash_leaves_no_file(tmp_path):
    path = tmp_path / "eval.json"
    with pytest.raises(RuntimeError):
        with SampleWriter(path) as w:
            w.write(_samples()[0])
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_bad_sample_rows(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"context": "c", "input": "q", "answers": ["x"]}\n{"context": 3, "input": "q"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2:context: expected a string, got int"):
        list(read_samples(p))
    p.write_text('{"context": "c", "input": "q", "answers": []}\n')
    with pytest.raises(DataError, match=r":1:answers"):
        list(read_samples(p))


@pytest.mark.parametrize("row, field", [('{"input": "q", "answers": ["x"]}', "context"),
                                        ('{"context": "c", "input": "q"}', "answers"),
                                        ('{"context": "c", "question": "q"}', "input")])
def test_a_missing_field_is_named_with_what_a_record_holds(tmp_path, row, field):
    p = tmp_path / "few.jsonl"
    p.write_text('{"context": "c", "input": "q", "answers": ["x"]}\n' + row + "\n")
    with pytest.raises(DataError, match=rf"few\.jsonl:2:{field}: missing field.*a long-context record needs context "
                                        r"\(the document text\), input \(the question\) and answers"):
        list(read_samples(p))


def test_a_sample_reads_as_a_record_mapping():
    """A reward written for dict samples tests keys and copies them: ``"answers" in sample`` raised KeyError: 0."""
    from memrl.workflows.api import default_id

    s = LongContextSample(index=4, question="q?", answers=["a"], context="Document 1:\nx", num_docs=1, id="h1",
                          extra={"level": "hard"})
    assert "answers" in s and "input" in s and "level" in s and "nope" not in s and 0 not in s
    assert s["input"] == "q?" and dict(s)["answers"] == ["a"] and dict(s)["level"] == "hard"
    assert list(s.keys())[:3] == ["index", "question", "answers"] and len(s) == len(dict(s))
    assert default_id(s) == "4"  # a built-in sample keeps its index as its id (resumed runs find their episodes)
    assert default_id({"id": "r1", "index": 2}) == "r1"
