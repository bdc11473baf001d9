import json

import pytest

from memrl.data import DataError, read_hotpotqa, read_paragraph_pool
from tests.data.helpers import make_example, write_examples


def test_reads_json_array_and_jsonl(tmp_path):
    a = list(read_hotpotqa(write_examples(tmp_path / "a.json")))
    b = list(read_hotpotqa(write_examples(tmp_path / "b.jsonl", jsonl=True)))
    assert [e.id for e in a] == [e.id for e in b] == [f"q{i}" for i in range(6)]
    ex = a[0]
    assert ex.answers == ["answer 0"]
    assert ex.gold_titles == ["Title 0-0", "Title 0-1"]
    assert ex.paragraphs[0].text == "Sentence 0.0.0 about topic 0. More on 0.0."  # sentences joined as stored
    assert [p.title for p in ex.gold_paragraphs] == ["Title 0-0", "Title 0-1"]


def test_real_hotpotqa_sample(hotpot_file):
    examples = list(read_hotpotqa(hotpot_file))
    assert len(examples) == 53
    assert examples[0].question == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert all(len(e.gold_paragraphs) >= 2 for e in examples)


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda r: r.pop("question"), ":3:question: missing field"),
        (lambda r: r.__setitem__("answer", 5), ":3:answer: expected a string, got int"),
        (lambda r: r.__setitem__("context", []), ":3:context: empty"),
        (lambda r: r.__setitem__("context", "text"), ":3:context: expected a list"),
        (lambda r: r["context"].__setitem__(1, ["T", 7]), ":3:context[1].sentences"),
        (lambda r: r.__setitem__("supporting_facts", [["Nope", 0]]), ":3:supporting_facts[0]: title 'Nope'"),
    ],
)
def test_bad_rows_name_file_row_field(tmp_path, mutate, where):
    rows = [make_example(i) for i in range(4)]
    mutate(rows[2])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError) as err:
        list(read_hotpotqa(path))
    assert str(err.value).startswith(str(path)) and where in str(err.value)
    assert err.value.row == 3


def test_bad_jsonl_line_and_non_object(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(make_example(0)) + "\n{not json\n")
    with pytest.raises(DataError, match=r"x\.jsonl:2: not valid JSON"):
        list(read_hotpotqa(p))
    p.write_text("[1]")
    p2 = tmp_path / "y.json"
    p2.write_text("[1]")
    with pytest.raises(DataError, match=r"y\.json:1: expected an object"):
        list(read_hotpotqa(p2))


def test_paragraph_pool_jsonl(tmp_path, shared_data):
    pool = list(read_paragraph_pool(shared_data / "wiki_paragraphs.jsonl"))
    assert len(pool) == 3632 and pool[0].title == "Anarchism"
    bad = tmp_path / "pool.jsonl"
    bad.write_text('{"title": "a", "text": "ok"}\n{"title": "b"}\n')
    with pytest.raises(DataError, match=r"pool\.jsonl:2:text"):
        list(read_paragraph_pool(bad))


def test_fact_titles_keep_every_cited_sentence_and_lenient_reading(tmp_path):
    """``fact_titles`` has one entry per supporting fact (ReMemR1's evidence); unknown titles pass only leniently."""
    from memrl.data.twowiki import read_multihop

    rec = make_example(0)
    rec["supporting_facts"] = [["Title 0-1", 0], ["Title 0-0", 1], ["Title 0-1", 1]]
    path = tmp_path / "q.json"
    path.write_text(json.dumps([rec]))
    ex = next(read_multihop(path))
    assert ex.fact_titles == ["Title 0-1", "Title 0-0", "Title 0-1"]
    assert ex.gold_titles == ["Title 0-1", "Title 0-0"]
    rec["supporting_facts"].append(["Missing", 0])
    path.write_text(json.dumps([rec]))
    with pytest.raises(DataError, match="supporting_facts\\[3\\]"):
        next(read_multihop(path))
    ex = next(read_multihop(path, strict_facts=False))
    assert ex.fact_titles[-1] == "Missing" and ex.gold_titles == ["Title 0-1", "Title 0-0"]
