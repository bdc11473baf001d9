"""``memrl data synth --protocol memagent`` against MemAgent's own scripts, run here on the shared 53 questions.

Golden files come from ``different_docs_eval.py`` / ``processing.py`` in ``../shared/originals``
(loaded with stand-ins for their hub tokenizer, pandas and process pool; the pool's worker runs in
this process with memrl's seeded stand-in for its unseeded RNG), and memrl's CLI output must equal
them byte for byte (eval files) or row for row (the training parquet).
"""

from __future__ import annotations

import ast
import json
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from tests.data.paper_originals import (MEMAGENT_DATA, ORIGINALS, REAL_RUN_PRELUDE, original_module, require_originals,
                                       run_real)

SIZES = [50, 200, 600, 700]  # the pool of the 53 questions has 521 paragraphs: 600 and 700 take all of it


def _synth(args: list[str], repo: Path | None):
    env = {"MEMRL_MEMAGENT_REPO": str(repo) if repo else None}  # None: unset for the call
    return CliRunner().invoke(app, ["data", "synth", "--protocol", "memagent", *args], env=env)


@pytest.fixture(scope="module")
def golden_eval(tmp_path_factory, hotpot_file) -> Path:
    """``different_docs_eval.generate_dataset`` for every size in turn after ``random.seed(42)``, as its main does."""
    require_originals()
    out = tmp_path_factory.mktemp("memagent_golden")
    with original_module(MEMAGENT_DATA / "different_docs_eval.py", paper="memagent", seed=42) as script:
        random.seed(42)
        qas, docs = script.read_hotpotqa(str(hotpot_file))
        for n in SIZES:
            script.generate_dataset(list(range(len(qas))), str(out / f"eval_{n}"), n, qas, docs)
    return out


def test_eval_files_are_byte_identical_to_memagents(tmp_path, hotpot_file, golden_eval):
    out = tmp_path / "out"
    r = _synth(["--input", str(hotpot_file), "--docs", ",".join(map(str, SIZES)), "--out", str(out)],
               ORIGINALS / "memagent")
    assert r.exit_code == 0, r.output
    for n in SIZES:
        mine, theirs = (out / f"eval_{n}.json").read_bytes(), (golden_eval / f"eval_{n}.json").read_bytes()
        assert mine == theirs, f"eval_{n}.json differs from MemAgent's"
    assert "the pool has 521 paragraphs" in r.output


def _gold_slots(rec: dict, question: dict) -> list[int]:
    docs = rec["context"].split("\n\nDocument ")
    own = {f"{t}\n{''.join(s)}" for t, s in question["context"]}
    return [k for k, d in enumerate(docs) if d.split(":\n", 1)[1] in own]


def test_every_sample_of_a_size_puts_its_paragraphs_in_the_same_slots(tmp_path, hotpot_file, golden_eval):
    """The fixed Random(4) permutation: at N=50 the question's ten paragraphs sit in slots 10, 17, ..., 47."""
    out = tmp_path / "out"
    assert _synth(["-i", str(hotpot_file), "-d", "50", "-o", str(out)], ORIGINALS / "memagent").exit_code == 0
    questions = json.loads(hotpot_file.read_text())
    recs = json.loads((out / "eval_50.json").read_text())
    slots = {rec["index"]: _gold_slots(rec, questions[rec["index"]]) for rec in recs}
    full = [i for i, q in enumerate(questions) if len(q["context"]) == 10]
    assert len(full) == 52 and {tuple(slots[i]) for i in full} == {(10, 17, 26, 28, 36, 40, 41, 42, 43, 47)}
    assert slots[27] == [26, 40]  # the one question with two paragraphs: the permutation's images of 0 and 1
    assert list(recs[0]) == ["context", "input", "answers", "num_docs", "index"]


def test_max_samples_takes_the_first_questions(tmp_path, hotpot_file):
    """``--max-samples K`` is the script run on indices 0..K-1 (every paragraph still in the pool)."""
    require_originals()
    out, gold = tmp_path / "out", tmp_path / "gold"
    gold.mkdir()
    with original_module(MEMAGENT_DATA / "different_docs_eval.py", paper="memagent", seed=7) as script:
        random.seed(7)
        qas, docs = script.read_hotpotqa(str(hotpot_file))
        for n in (100, 300):
            script.generate_dataset(list(range(5)), str(gold / f"eval_{n}"), n, qas, docs)
    r = _synth(["-i", str(hotpot_file), "-d", "300,100", "--max-samples", "5", "--seed", "7", "-o", str(out)],
               ORIGINALS / "memagent")
    assert r.exit_code == 0, r.output
    for n in (100, 300):
        assert (out / f"eval_{n}.json").read_bytes() == (gold / f"eval_{n}.json").read_bytes()


def test_indices_take_the_scripts_question_list(tmp_path, hotpot_file):
    """``--indices eval_200.json``: MemAgent's main reads its questions from its own file's ``index`` fields."""
    require_originals()
    picked = [40, 3, 17, 3]
    listing = tmp_path / "eval_200.json"
    listing.write_text(json.dumps([{"index": i, "input": "?"} for i in picked]))
    gold = tmp_path / "gold"
    gold.mkdir()
    with original_module(MEMAGENT_DATA / "different_docs_eval.py", paper="memagent", seed=42) as script:
        random.seed(42)
        qas, docs = script.read_hotpotqa(str(hotpot_file))
        for n in (50, 600):
            script.generate_dataset(picked, str(gold / f"eval_{n}"), n, qas, docs)
    out = tmp_path / "out"
    r = _synth(["-i", str(hotpot_file), "-d", "600,50", "--indices", str(listing), "-o", str(out)],
               ORIGINALS / "memagent")
    assert r.exit_code == 0, r.output
    for n in (50, 600):
        assert (out / f"eval_{n}.json").read_bytes() == (gold / f"eval_{n}.json").read_bytes()
    assert [rec["index"] for rec in json.loads((out / "eval_50.json").read_text())] == picked
    listing.write_text(json.dumps([1, 99]))
    r = _synth(["-i", str(hotpot_file), "-d", "50", "--indices", str(listing), "-o", str(out)], ORIGINALS / "memagent")
    assert r.exit_code == 2 and "item 1: 99 is not a question index of the input (0..52)" in r.output


def test_a_size_does_not_depend_on_the_others_asked_for(tmp_path, hotpot_file):
    """Each size draws from its own RNG and starts from the sorted pool, as each size's new workers do."""
    require_originals()
    both, alone = tmp_path / "both", tmp_path / "alone"
    for out, docs in ((both, "50,200,600,700"), (alone, "200,700")):
        assert _synth(["-i", str(hotpot_file), "-d", docs, "-o", str(out)], ORIGINALS / "memagent").exit_code == 0
    for n in (200, 700):
        assert (both / f"eval_{n}.json").read_bytes() == (alone / f"eval_{n}.json").read_bytes()


def _train_files(tmp_path, hotpot_file, num_samples: int):
    """(processing.py's rows for generate_dataset(num_samples, ...), memrl's CLI result, its --out)."""
    require_originals()
    gold = tmp_path / "gold"
    gold.mkdir()
    with original_module(MEMAGENT_DATA / "processing.py", paper="memagent-train", seed=42) as script:
        random.seed(42)
        qas, docs = script.read_hotpotqa(str(hotpot_file))
        script.generate_dataset(num_samples, str(gold / "train"), 200, qas, docs)
    out = tmp_path / "out"
    r = _synth(["-i", str(hotpot_file), "--train-tokens", "32k", "-o", str(out)], ORIGINALS / "memagent")
    assert r.exit_code == 0, r.output
    return json.loads((gold / "train.parquet.rows.json").read_text()), r, out


def test_training_file_equals_processing_py(tmp_path, hotpot_file):
    """200 documents per question at fixed slots, processing.py's record; --train-tokens is announced as unused."""
    import pyarrow.parquet as pq

    theirs, r, out = _train_files(tmp_path, hotpot_file, 80000)
    assert "--train-tokens does not apply" in r.output
    mine = pq.read_table(out / "train_32k.parquet").to_pylist()
    assert len(mine) == len(theirs) == 53
    assert mine == theirs
    assert all(row["context"].count("\n\nDocument ") == 199 for row in mine)


def test_the_training_file_holds_the_scripts_first_questions(tmp_path, hotpot_file, monkeypatch):
    """processing.py keeps min(80000, questions): HotpotQA train has ~90k, the paper's file the first 80,000.
    Here the cap is 20 (of 53), against the script's own generate_dataset(20, ...)."""
    import pyarrow.parquet as pq

    from memrl.data import memagent_synth

    monkeypatch.setattr(memagent_synth, "TRAIN_QUESTIONS", 20)
    theirs, r, out = _train_files(tmp_path, hotpot_file, 20)
    assert "holds the first 20 of the 53 questions" in r.output
    assert pq.read_table(out / "train_32k.parquet").to_pylist() == theirs


def test_the_document_template_comes_from_the_checkout(tmp_path, hotpot_file):
    """memrl has no copy of MemAgent's template: an edited checkout changes the output."""
    require_originals()
    repo = tmp_path / "MemAgent"
    shutil.copytree(ORIGINALS / "memagent", repo)
    script = repo / "taskutils" / "memory_data" / "different_docs_eval.py"
    script.chmod(0o644)
    text = script.read_text()
    old = next(n.value.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", "") == "DOCUMENT_PROMPT")
    script.write_text(text.replace(repr(old).strip("'"), "Passage {i} -> {document}"))
    r = _synth(["-i", str(hotpot_file), "-d", "50", "-o", str(tmp_path / "out")], repo)
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "out" / "eval_50.json").read_text())[0]
    assert rec["context"].startswith("Passage 1 -> ") and "\n\nPassage 50 -> " in rec["context"]


def test_missing_checkout_is_one_line_naming_where_to_get_it(tmp_path, hotpot_file):
    r = _synth(["-i", str(hotpot_file), "-d", "50", "-o", str(tmp_path / "out")], None)
    assert r.exit_code == 2
    line = r.output.strip()
    assert "\n" not in line and "--memagent-repo" in line and "MEMRL_MEMAGENT_REPO" in line
    assert "https://github.com/BytedTsinghua-SIA/MemAgent" in line and "76b7a65" in line
    assert not (tmp_path / "out" / "eval_50.json").exists()


@pytest.mark.parametrize("args, flag", [(["--format", "jsonl"], "--format"), (["--allow-repeats"], "--allow-repeats"),
                                        (["--min-distance", "10"], "--min-distance"),
                                        (["--protocol", "ruler"], "--protocol")])
def test_options_the_script_lacks_are_refused(tmp_path, hotpot_file, args, flag):
    r = _synth(["-i", str(hotpot_file), "-d", "50", "-o", str(tmp_path / "out"), *args], ORIGINALS / "memagent")
    assert r.exit_code == 2 and flag in r.output, r.output


def test_src_holds_none_of_the_scripts_text():
    """The originals' template and prompt strings are read at run time, never pasted into memrl's source."""
    require_originals()
    texts = set()
    for script in (MEMAGENT_DATA / "different_docs_eval.py", MEMAGENT_DATA / "processing.py",
                   MEMAGENT_DATA / "filter.py",
                   ORIGINALS / "rememr1" / "taskutils" / "data_synthesis" / "process_test.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, str) and len(node.value.value) > 12:
                texts.add(node.value.value)
    assert texts
    src = Path(__file__).resolve().parents[2] / "src"
    for path in src.rglob("*.py"):
        code = path.read_text()
        literals = {n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant)
                    and isinstance(n.value, str)}
        for text in texts:
            assert text not in literals and text not in code, f"{path} holds the original's text {text!r}"


_REAL_RUN = REAL_RUN_PRELUDE + """
sys.modules["pandas"] = types.ModuleType("pandas")
os.cpu_count = lambda: 1  # one worker: the only run whose whole-pool samples do not depend on scheduling
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("different_docs_eval", os.path.join(sys.argv[1], "different_docs_eval.py"))
script = importlib.util.module_from_spec(spec)
sys.modules["different_docs_eval"] = script
spec.loader.exec_module(script)
random.seed(42)
qas, docs = script.read_hotpotqa(sys.argv[2])
for n in (600, 700):
    script.generate_dataset(list(range(len(qas))), os.path.join(sys.argv[3], "eval_%d" % n), n, qas, docs)
"""


@pytest.mark.timeout(300)
def test_whole_pool_files_equal_the_real_scripts_run_with_one_worker(tmp_path, hotpot_file):
    """No draw at N >= pool: the unmodified script with its real process pool (one worker) writes memrl's bytes."""
    pytest.importorskip("rich")
    pytest.importorskip("tqdm")
    require_originals()
    gold = tmp_path / "gold"
    gold.mkdir()
    out = run_real(tmp_path, _REAL_RUN, str(MEMAGENT_DATA), str(hotpot_file), str(gold))
    assert out.returncode == 0, out.stderr[-2000:]
    r = _synth(["-i", str(hotpot_file), "-d", "700,600", "-o", str(tmp_path / "out")], ORIGINALS / "memagent")
    assert r.exit_code == 0, r.output
    for n in (600, 700):
        assert (tmp_path / "out" / f"eval_{n}.json").read_bytes() == (gold / f"eval_{n}.json").read_bytes(), n


def test_above_ten_thousand_documents_every_sample_has_the_scripts_one_order(tmp_path, hotpot_file):
    """Past 10,000 documents ``different_docs_eval.py`` writes id lists (``generate_index_only``), shuffling a fresh
    list: at N >= pool every sample gets the same order (no draw, no worker dependence). memrl writes them as text."""
    from memrl.data.memagent_synth import memagent_templates
    from memrl.data.paper_docs import render_context

    require_originals()
    picked = [40, 3, 17, 3]
    listing = tmp_path / "eval_200.json"
    listing.write_text(json.dumps([{"index": i} for i in picked]))
    with original_module(MEMAGENT_DATA / "different_docs_eval.py", paper="memagent", seed=42) as script:
        random.seed(42)
        qas, docs = script.read_hotpotqa(str(hotpot_file))
        theirs = script.generate_dataset(picked, str(tmp_path / "gold_12800"), 12800, qas, docs)
    out = tmp_path / "out"
    r = _synth(["-i", str(hotpot_file), "-d", "12800", "--indices", str(listing), "-o", str(out)],
               ORIGINALS / "memagent")
    assert r.exit_code == 0, r.output
    mine = json.loads((out / "eval_12800.json").read_text())
    template = memagent_templates(ORIGINALS / "memagent")[0]
    assert len({tuple(t["context"]) for t in theirs}) == 1  # one order for every sample
    for m, t in zip(mine, theirs, strict=True):
        assert m == {**t, "context": render_context(template, [docs[i] for i in t["context"]])}


def test_a_gold_that_normalises_to_nothing_is_kept_as_the_script_keeps_it(tmp_path, hotpot_file):
    """memrl's own generator refuses a gold like "a" (it matches every answer); the paper's script copies it."""
    require_originals()
    rows = json.loads(Path(hotpot_file).read_text())
    rows[2]["answer"] = "a"
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(rows))
    gold = tmp_path / "gold"
    gold.mkdir()
    with original_module(MEMAGENT_DATA / "different_docs_eval.py", paper="memagent", seed=42) as script:
        random.seed(42)
        qas, docs = script.read_hotpotqa(str(odd))
        script.generate_dataset(list(range(len(qas))), str(gold / "eval_50"), 50, qas, docs)
    out = tmp_path / "out"
    r = _synth(["-i", str(odd), "-d", "50", "-o", str(out)], ORIGINALS / "memagent")
    assert r.exit_code == 0, r.output
    assert "1 question(s) have a gold answer that normalises to nothing (input row 3 first)" in r.output
    assert (out / "eval_50.json").read_bytes() == (gold / "eval_50.json").read_bytes()
