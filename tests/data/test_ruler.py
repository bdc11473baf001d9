"""RULER suite generators: published task shapes, filled lengths, recoverable answers, RULER's metrics."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memrl.data import DataError, read_samples
from memrl.data.ruler import MEMAGENT_TASKS, TASKS, LengthError, generate, parse_file_name, parse_lengths, parse_tasks
from memrl.data.ruler_base import RulerSources
from memrl.data.ruler_metric import prediction_text, score, string_match_all, string_match_part
from memrl.data.ruler_niah import NIAH_TASKS
from memrl.data.ruler_tasks import cwe_repeats, zeta, zipf_counts
from memrl.data.ruler_text import REPEATED_PASSAGE
from memrl.data.tokens import load_token_counter

NEEDLE = re.compile(r"The special magic (number|word|uuid) for (\S+) is: (\S+)\.")
VALUE = {"numbers": r"\d{7}", "words": r"[a-z]+-[a-z]+",
         "uuids": r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"}


@pytest.fixture(scope="module")
def counter():
    return load_token_counter("tiny")


def check_length(sample, counter, length: int) -> None:
    """Context + question + answer room fit the target, and fill at least 90% of it."""
    tokens = counter.count(sample.context) + counter.count(sample.question)
    assert tokens == sample.extra["tokens"]
    assert sample.extra["length"] == length
    total = tokens + TASKS[sample.extra["task"]].answer_tokens
    assert 0.9 * length <= total <= length


@pytest.mark.parametrize("task", list(NIAH_TASKS))
def test_niah_shapes_lengths_and_recoverable_values(task, counter):
    cfg = NIAH_TASKS[task]
    for s in generate(task, 2048, counter, samples=3, seed=3):
        check_length(s, counter, 2048)
        needles = NEEDLE.findall(s.context)
        planted_keys = max(cfg.keys, cfg.queries)
        queried = s.extra["keys"]
        assert len(queried) == cfg.queries and len(s.answers) == cfg.queries * cfg.values
        if cfg.haystack == "needle":  # the haystack is made of needles with other keys
            assert len(needles) == s.extra["haystack_units"] + planted_keys * cfg.values
        else:
            assert len(needles) == planted_keys * cfg.values
            assert len({k for _, k, _ in needles}) == planted_keys
        if cfg.haystack == "repeat":
            assert s.context.count(REPEATED_PASSAGE) == s.extra["haystack_units"]
        # every gold value is recoverable: exactly the values the context binds to the queried keys
        recovered = [v for _, k, v in needles if k in queried]
        assert sorted(recovered) == sorted(s.answers)
        for _, key, value in needles:
            assert re.fullmatch(VALUE[cfg.value_type], value)
            assert re.fullmatch(VALUE[cfg.key_type], key)
        for key in queried:
            assert key in s.question


def test_vt_chain_is_recoverable_by_following_assignments(counter):
    for s in generate("vt", 2048, counter, samples=3, seed=5):
        check_length(s, counter, 2048)
        value = s.extra["value"]
        assert value in s.question and len(s.answers) == 5  # one chain, four hops
        (start,) = re.findall(rf"VAR ([A-Z]{{5}}) = {value}\.", s.context)
        chain, current = [start], start
        while True:
            nxt = re.findall(rf"VAR ([A-Z]{{5}}) = VAR {current}\.", s.context)
            if not nxt:
                break
            (current,) = nxt
            chain.append(current)
        assert chain == s.answers
        positions = [s.context.index(f"VAR {v} =") for v in chain]
        assert positions == sorted(positions)  # statements appear in chain order


@pytest.mark.parametrize("length", [2048, 4096])
def test_cwe_ten_words_repeated_more_than_all_others(length, counter):
    common_rep, other_rep = cwe_repeats(length)
    assert (common_rep, other_rep) == ((6, 1) if length < 4096 else (30, 3))
    for s in generate("cwe", length, counter, samples=2, seed=1):
        check_length(s, counter, length)
        entries = re.findall(r"(\d+)\. (\S+)", s.context)
        assert [int(n) for n, _ in entries] == list(range(1, len(entries) + 1))
        counts = Counter(w for _, w in entries)
        assert len(s.answers) == 10 and all(counts[w] == common_rep for w in s.answers)
        assert all(c == other_rep for w, c in counts.items() if w not in s.answers)


def test_fwe_answers_are_ranks_two_to_four_after_the_noise_word(counter):
    for s in generate("fwe", 2048, counter, samples=2, seed=2):
        check_length(s, counter, 2048)
        ranked = Counter(s.context.split()).most_common()
        assert ranked[0][0] == "..."
        assert [w for w, _ in ranked[1:4]] == s.answers
        assert ranked[3][1] > ranked[4][1]  # no tie at the cut
        assert all(re.fullmatch(r"[a-z]{6}", w) for w in s.answers)


def test_zipf_counts_follow_alpha_two():
    assert zeta(2.0) == pytest.approx(3.14159265358979**2 / 6, abs=1e-9)
    counts = zipf_counts(10_000, 100)
    assert counts[:4] == [int(10_000 / k**2 / zeta(2.0)) for k in range(1, 5)] == [6079, 1519, 675, 379]


def test_qa_2_hotpotqa_documents_hold_the_evidence(counter, hotpot_file):
    from memrl.data.hotpotqa import read_hotpotqa

    examples = list(read_hotpotqa(hotpot_file))
    sources = RulerSources(hotpotqa=str(hotpot_file))
    for s in generate("qa_2", 8192, counter, samples=3, seed=4, sources=sources):
        check_length(s, counter, 8192)
        ex = examples[s.index]
        assert s.question == ex.question and s.answers == ex.answers
        docs = re.split(r"\n\nDocument \d+:\n", "\n\n" + s.context)[1:]
        assert len(docs) == s.num_docs and s.context.startswith("Document 1:\n")
        gold_titles = {docs[n - 1].split("\n", 1)[0] for n in s.gold_docs}
        assert gold_titles == set(ex.gold_titles)
        assert s.extra["metric"] == "string_match_part"


def _squad_file(path: Path) -> Path:
    """A made-up SQuAD v2 file: 3 articles x 8 paragraphs, one answerable and one impossible question each."""
    articles = []
    for a in range(3):
        paragraphs = []
        for p in range(8):
            text = f"Paragraph {a}.{p}. " + " ".join(f"filler{a}{p}{k}" for k in range(10)) + f" The code is Z{a}{p}Q."
            paragraphs.append({"context": text, "qas": [
                {"question": f"What is the code of paragraph {a}.{p}?", "is_impossible": False,
                 "answers": [{"text": f"Z{a}{p}Q", "answer_start": 0}, {"text": f"is Z{a}{p}Q", "answer_start": 0}]},
                {"question": "Unanswerable?", "is_impossible": True, "answers": []}]})
        articles.append({"title": f"Article {a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "v2.0", "data": articles}))
    return path


def test_qa_1_squad_answer_span_is_in_its_gold_document(counter, tmp_path):
    sources = RulerSources(squad=str(_squad_file(tmp_path / "squad.json")))
    samples = list(generate("qa_1", 2048, counter, samples=30, seed=0, sources=sources))
    assert len(samples) == 24  # answerable questions only; fewer than asked
    for s in samples[:4]:
        check_length(s, counter, 2048)
        (gold,) = s.gold_docs
        doc = re.split(r"\n\nDocument \d+:\n", "\n\n" + s.context)[gold]
        assert all(answer in doc for answer in s.answers) and len(s.answers) == 2


def test_samples_are_seeded_and_independent_of_the_sample_count(counter):
    a = list(generate("niah_multikey_2", 1024, counter, samples=3, seed=9))
    b = list(generate("niah_multikey_2", 1024, counter, samples=2, seed=9))
    c = list(generate("niah_multikey_2", 1024, counter, samples=1, seed=10))
    assert [s.context for s in a[:2]] == [s.context for s in b]
    assert a[0].context != c[0].context and a[0].context != a[1].context


def test_a_target_too_short_for_the_task_is_refused(counter):
    with pytest.raises(LengthError, match="choose a longer --lengths"):
        list(generate("niah_single_1", 140, counter, samples=1))


def test_a_too_small_qa_pool_is_refused(counter, tmp_path):
    sources = RulerSources(squad=str(_squad_file(tmp_path / "squad.json")))
    with pytest.raises(LengthError, match="--pool"):
        list(generate("qa_1", 65536, counter, samples=1, sources=sources))


def test_metrics_hand_checked():
    golds = ["1234567", "7654321", "ABCDE"]
    assert string_match_all("The values are 1234567 and abcde.", golds) == pytest.approx(2 / 3)
    assert string_match_all("", golds) == 0.0
    assert string_match_all("1234567 7654321 AbCdE", golds) == 1.0
    assert string_match_part("It was Paris, France", ["london", "PARIS"]) == 1.0
    assert string_match_part("Lyon", ["london", "paris"]) == 0.0
    assert score("string_match_all", "x\x00y 1234567", ["1234567"]) == 1.0
    with pytest.raises(ValueError):
        score("f1", "a", ["a"])
    assert prediction_text("I think \\boxed{1234567, ABCDE}.") == "1234567, ABCDE"
    assert prediction_text("no box: 1234567") == "no box: 1234567"
    assert prediction_text(None) == ""


def test_names_lengths_and_task_lists():
    assert parse_lengths("8k, 16k,512k") == [8192, 16384, 524288]
    assert parse_lengths("3000") == [3000]
    with pytest.raises(ValueError, match="--lengths"):
        parse_lengths("8x")
    assert parse_tasks("memagent") == list(MEMAGENT_TASKS)
    assert len(MEMAGENT_TASKS) == 11 and "fwe" in MEMAGENT_TASKS and "cwe" not in MEMAGENT_TASKS
    assert parse_tasks("vt,vt,fwe") == ["vt", "fwe"] and len(parse_tasks("all")) == 13
    with pytest.raises(ValueError, match="unknown task"):
        parse_tasks("niah_single_9")
    assert parse_file_name("ruler_niah_single_1_8192.jsonl") == ("niah_single_1", 8192)
    assert parse_file_name("eval_50.json") is None


def test_cli_writes_files_in_the_long_context_layout(tmp_path):
    from memrl.cli.main import app

    out = tmp_path / "ruler"
    res = CliRunner().invoke(app, ["data", "ruler", "--tokenizer", "tiny", "--lengths", "1k", "--tasks",
                                   "niah_single_1,fwe", "--samples", "2", "--seed", "7", "--out", str(out)])
    assert res.exit_code == 0, res.output
    for task in ("niah_single_1", "fwe"):
        samples = list(read_samples(out / f"ruler_{task}_1024.jsonl"))
        assert [s.index for s in samples] == [0, 1]
        assert all(s.extra["task"] == task and s.extra["length"] == 1024 for s in samples)
    report = json.loads((out / "ruler_report.json").read_text())
    assert [(r["task"], r["samples"]) for r in report] == [("niah_single_1", 2), ("fwe", 2)]
    assert "ruler_fwe_1024.jsonl" in json.loads((out / ".memrl-output").read_text())["entries"]


def test_cli_qa_1_without_squad_is_a_one_line_error(tmp_path):
    from memrl.cli.main import app

    res = CliRunner().invoke(app, ["data", "ruler", "--tokenizer", "tiny", "--lengths", "1k", "--tasks", "qa_1",
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "qa_1 needs --squad" in res.output


def test_essay_file_haystack_reads_the_users_prose_in_order(counter, tmp_path):
    from memrl.data.ruler_text import EssaySource, load_essay_sentences

    prose = tmp_path / "essays.txt"
    prose.write_text(" ".join(f"Sentence number {i} of the essay." for i in range(50)))
    sentences = load_essay_sentences(prose)
    assert len(sentences) == 50 and sentences[3] == "Sentence number 3 of the essay."
    sources = RulerSources(essay=EssaySource(sentences))
    (s,) = generate("niah_single_2", 1024, counter, samples=1, seed=0, sources=sources)
    numbers = [int(n) for n in re.findall(r"Sentence number (\d+)", s.context)]
    assert numbers == [(numbers[0] + i) % 50 for i in range(len(numbers))]  # consecutive, wrapping around
    assert len(NEEDLE.findall(s.context)) == 1
    (tmp_path / "short.txt").write_text("Too short.")
    with pytest.raises(ValueError, match="only 1 sentences"):
        load_essay_sentences(tmp_path / "short.txt")


def test_a_broken_essay_file_names_its_line_or_byte(tmp_path):
    from memrl.data.ruler_text import load_essay_sentences

    rows = [json.dumps({"text": f"Sentence {i} of the essay."}) for i in range(20)]
    good = tmp_path / "essays.jsonl"
    good.write_text("\n".join(rows) + "\n")
    assert len(load_essay_sentences(good)) == 20
    bad = tmp_path / "cut.jsonl"
    bad.write_text("\n".join(rows[:7] + [rows[7][:-3]] + rows[8:]))
    with pytest.raises(DataError, match=r"cut.jsonl:8: not valid JSON \(neither one JSON document nor JSON lines\)"):
        load_essay_sentences(bad)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"Caf\xe9 society. " * 20)
    with pytest.raises(DataError, match=r"latin.txt: not UTF-8 text \(byte 0xe9 at offset 3\)"):
        load_essay_sentences(latin)


def test_later_samples_start_from_the_previous_size(counter):
    from memrl.data.ruler import make_filler

    filler = make_filler("niah_single_1", 4096, counter, RulerSources(), seed=0)
    filler.sample(0)
    first = filler.probes
    for i in range(1, 4):
        filler.sample(i)
    assert (filler.probes - first) <= 2 * 3  # the repeated haystack has the same size every time


def test_qa_files_no_task_reads_are_said_not_dropped_silently(tmp_path):
    from memrl.cli.main import app

    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text("[]")
    pool = tmp_path / "pool.jsonl"
    pool.write_text('{"title": "t", "text": "x"}\n')
    res = CliRunner().invoke(app, ["data", "ruler", "--tokenizer", "tiny", "--lengths", "1k", "--tasks", "fwe",
                                   "--samples", "1", "--hotpotqa", str(hotpot), "--pool", str(pool),
                                   "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "--hotpotqa not used: qa_2 is not among the tasks written (add it: --tasks fwe,qa_2)" in said
    assert "--pool not used" in said and "--squad" not in said
