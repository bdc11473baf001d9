"""Inputs that used to pass silently (or fail without naming the file) are refused up front."""

import json

import pytest

from memrl.data import DataError, plan_synthesis, read_hotpotqa, read_paragraph_pool, read_samples
from memrl.data.longctx import LongContextSample, write_samples
from tests.data.helpers import make_example, write_examples


@pytest.mark.parametrize("value, field", [("", "answer"), ("  ", "answer"), ("The", "answer")])
def test_empty_gold_answer_is_refused(tmp_path, value, field):
    rows = [make_example(i) for i in range(3)]
    rows[1]["answer"] = value
    src = tmp_path / "q.json"
    src.write_text(json.dumps(rows))
    with pytest.raises(DataError) as err:
        list(read_hotpotqa(src))
    assert str(err.value).startswith(f"{src}:2:{field}: empty gold answer")


def test_empty_string_in_an_answers_list_is_refused(tmp_path):
    rows = [make_example(0)]
    del rows[0]["answer"]
    rows[0]["answers"] = ["Paris", ""]
    src = tmp_path / "q.jsonl"
    src.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(DataError, match=r"q\.jsonl:1:answers\[1\]: empty gold answer"):
        list(read_hotpotqa(src))


@pytest.mark.parametrize("schema, field", [("eval", "answers[0]"), ("train", "reward_model.ground_truth[0]")])
def test_long_context_files_refuse_empty_golds(tmp_path, schema, field):
    path = tmp_path / f"{schema}.jsonl"
    write_samples([LongContextSample(0, "Q?", ["x"], "ctx", 1), LongContextSample(1, "Q?", [""], "ctx", 1)],
                  path, schema=schema)
    with pytest.raises(DataError) as err:
        list(read_samples(path))
    assert str(err.value).startswith(f"{path}:2:{field}: empty gold answer")


def test_non_utf8_input_names_the_file_and_row(tmp_path):
    good = json.dumps(make_example(0)).encode()
    jsonl = tmp_path / "latin1.jsonl"
    jsonl.write_bytes(good + b"\n" + good.replace(b"answer 0", b"r\xe9ponse") + b"\n")
    with pytest.raises(DataError, match=r"latin1\.jsonl:2: not UTF-8 text \(byte 0xe9"):
        list(read_hotpotqa(jsonl))
    array = tmp_path / "latin1.json"
    array.write_bytes(b"[" + good.replace(b"answer 0", b"r\xe9ponse") + b"]")
    with pytest.raises(DataError, match=r"latin1\.json: not UTF-8 text"):
        list(read_hotpotqa(array))


def test_a_folder_is_not_reported_as_missing(tmp_path):
    with pytest.raises(DataError) as err:
        list(read_paragraph_pool(tmp_path))
    assert str(err.value) == f"{tmp_path}: is a folder, expected a file (JSON, JSONL or parquet)"
    with pytest.raises(DataError, match="file not found"):
        list(read_hotpotqa(tmp_path / "missing.json"))


def test_train_budget_larger_than_the_pool_fails_before_writing(tmp_path):
    src = write_examples(tmp_path / "q.json", n=4, n_para=4)  # 16 short paragraphs, a few hundred tokens
    with pytest.raises(DataError) as err:
        plan_synthesis(src, tmp_path / "out", [], train_tokens=1024 * 1024)
    msg = str(err.value)
    assert msg.startswith(f"{src}:1:context: --train-tokens 1,048,576")
    assert "the paragraph pool gives at most about" in msg and "--pool" in msg
    assert not (tmp_path / "out").exists()
    plan_synthesis(src, tmp_path / "out", [], train_tokens=1024 * 1024, allow_repeats=True)  # repeats can fill it


def test_a_budget_the_pool_can_fill_is_accepted_and_filled(tmp_path):
    src = write_examples(tmp_path / "q.json", n=6, n_para=4)
    plan = plan_synthesis(src, tmp_path / "out", [], train_tokens=120)
    (report,) = plan.run()
    assert report.tokens_max <= 120 and report.tokens_min > 60


@pytest.mark.parametrize("extra, field", [
    ({"index": "abc"}, "index"), ({"index": 2.7}, "index"), ({"index": True}, "index"),
    ({"num_docs": "many"}, "num_docs"), ({"gold_docs": 5}, "gold_docs"),
])
def test_a_bad_optional_field_names_its_file_row_and_field(tmp_path, extra, field):
    rows = [{"context": "Document 1: x", "input": "q?", "answers": ["x"]} for _ in range(3)]
    rows[1].update(extra)
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as err:
        list(read_samples(path))
    assert str(err.value).startswith(f"{path}:2:{field}: expected ")


@pytest.mark.parametrize("answers, message", [
    ([12], "5:answers[0]: expected a string, got int 12"),
    (["Paris", None], "5:answers[1]: expected a string, got null"),
    ([], "5:answers: empty list: a row needs at least one gold answer"),
    ({"a": 1}, "5:answers: expected a non-empty list of strings, got dict"),
])
def test_bad_gold_answers_name_the_element_to_fix(tmp_path, answers, message):
    """Numeric golds are common in converted datasets: the error says which element, not just "got list"."""
    rows = [{"context": "Document 1: x", "input": "q?", "answers": ["x"]} for _ in range(6)]
    rows[4]["answers"] = answers
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as err:
        list(read_samples(path))
    assert str(err.value) == f"{path}:{message}"
    hot = [make_example(i) for i in range(5)]
    del hot[4]["answer"]
    hot[4]["answers"] = answers
    src = tmp_path / "hot.json"
    src.write_text(json.dumps(hot))
    with pytest.raises(DataError) as err:
        list(read_hotpotqa(src))
    assert str(err.value) == f"{src}:{message}"


def test_optional_fields_in_their_usual_spellings_are_read(tmp_path):
    rows = [{"context": "Document 1: x", "input": "q?", "answers": ["x"], **extra}
            for extra in ({"index": None}, {"index": 7.0, "num_docs": "3"}, {"gold_docs": None})]
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = list(read_samples(path))
    assert [s.index for s in got] == [0, 7, 2] and got[1].num_docs == 3 and got[2].gold_docs == []


def test_a_train_record_whose_extra_info_is_not_an_object_is_named(tmp_path):
    rec = {"context": "x", "prompt": [{"role": "user", "content": "q?"}],
           "reward_model": {"ground_truth": ["x"]}, "extra_info": "x"}
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(DataError, match=r"train.jsonl:1:extra_info: expected an object"):
        list(read_samples(path))
