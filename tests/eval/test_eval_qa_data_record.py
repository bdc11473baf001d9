"""``memrl eval --data DIR --docs N``: each eval_N file is recorded and checked like ``--data FILE`` is, a bad
record fails before any model loads, and a re-run with fewer ``--docs`` keeps reporting the sizes on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.eval.helpers import needle_eval_dir

E = ["workflow.options.chunk_tokens=64", "workflow.options.memory_tokens=8", "workflow.options.final_tokens=8",
     "engine.device=cpu"]


def memrl_eval(data: Path, out: Path, *args: object):
    from memrl.cli.main import app

    return CliRunner().invoke(app, ["eval", "--model", "tiny", "--workflow", "memagent", "--data", str(data),
                                    "--out", str(out), *map(str, args), *E])


def test_a_changed_eval_file_is_refused_and_other_sizes_join(tmp_path):
    data = needle_eval_dir(tmp_path / "d", n=8, count=2)
    needle_eval_dir(data, n=16, count=2)
    out = tmp_path / "out"
    assert memrl_eval(data, out, "--docs", "8").exit_code == 0
    changed = (data / "eval_8.jsonl").read_text().replace('"input": "', '"input": "Q ', 1)
    (data / "eval_8.jsonl").write_text(changed)
    r = memrl_eval(data, out, "--docs", "8")
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith(f"error: --data: {out} holds results of {(data / 'eval_8.jsonl').resolve()}, "
                                       "which has changed since (sha256 ")
    assert len(r.output.strip().splitlines()) == 1
    r = memrl_eval(data, out, "--docs", "16")  # a size not run before joins; the changed one still counts
    assert r.exit_code == 0, r.output
    r = memrl_eval(data, out, "--docs", "8,16")
    assert r.exit_code == 2 and "which has changed since" in r.output
    r = memrl_eval(data, out, "--docs", "8", "--restart")
    assert r.exit_code == 0, r.output


def test_one_file_of_samples_and_a_folder_of_eval_files_do_not_mix(tmp_path):
    data = needle_eval_dir(tmp_path / "d", n=8, count=2)
    out = tmp_path / "out"
    assert memrl_eval(data, out, "--docs", "8").exit_code == 0
    r = memrl_eval(data / "eval_8.jsonl", out)
    assert r.exit_code == 2 and r.output.strip() == (
        f"error: --data: {out} holds results of the eval files of --docs 8 in {data.resolve()}, not of the file of "
        f"samples {(data / 'eval_8.jsonl').resolve()}; use another --out, or pass --restart to replace them")


def test_fewer_docs_keep_the_sizes_finished_before_in_the_results(tmp_path):
    data = needle_eval_dir(tmp_path / "d", n=8, count=2)
    needle_eval_dir(data, n=16, count=2)
    out = tmp_path / "out"
    assert memrl_eval(data, out, "--docs", "8,16").exit_code == 0
    r = memrl_eval(data, out, "--docs", "8")
    assert r.exit_code == 0, r.output
    assert set(json.loads((out / "results.json").read_text())["by_docs"]) == {"8", "16"}
    assert "| 16 |" in (out / "results.md").read_text()
    assert "also report 16 documents, finished by an earlier run" in " ".join(r.output.split())


@pytest.mark.parametrize("folder", [True, False])
def test_a_bad_record_fails_before_any_model_loads_and_writes_nothing(tmp_path, monkeypatch, folder):
    import memrl.engines.factory
    import memrl.models.resolve

    def must_not_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model loaded before the data was read")

    monkeypatch.setattr(memrl.models.resolve, "load_tokenizer", must_not_load)
    monkeypatch.setattr(memrl.engines.factory, "build_engine", must_not_load)
    data = tmp_path / "d"
    data.mkdir()
    (data / "eval_8.jsonl").write_text(json.dumps({"context": "x", "input": "q", "answers": ["violet"]}) + "\n"
                                       + json.dumps({"context": "x", "input": "q"}) + "\n")
    out = tmp_path / "out"
    r = memrl_eval(data, out, "--docs", "8") if folder else memrl_eval(data / "eval_8.jsonl", out)
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [f"error: {data / 'eval_8.jsonl'}:2:answers: missing field; a long-context "
                                             "record needs context (the document text), input (the question) and "
                                             "answers (a list of gold answers)"]
    assert not out.exists()
