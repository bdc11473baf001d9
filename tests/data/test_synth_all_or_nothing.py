"""``memrl data synth`` writes its files as a set: a size that fails leaves none behind; a lone surrogate
in the input is a ``file:row:field`` error before anything is written."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from memrl.data.errors import DataError
from memrl.data.synth import Synthesizer, plan_synthesis
from tests.data.helpers import make_example, write_examples


def synth(*args):
    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["data", "synth", *map(str, args)])
    return r.exit_code, r.output.strip().splitlines()


def test_a_failing_later_size_leaves_no_earlier_file(tmp_path, monkeypatch):
    src = write_examples(tmp_path / "q.json")
    out = tmp_path / "o"
    out.mkdir()
    real = Synthesizer.write_eval_file

    def fail_on_10(self, n, path, fmt="json", progress=None):
        if n == 10:
            raise OSError(28, "No space left on device")
        return real(self, n, path, fmt, progress)

    monkeypatch.setattr(Synthesizer, "write_eval_file", fail_on_10)
    plan = plan_synthesis(src, out, [4, 10])
    with pytest.raises(OSError):
        plan.run()
    assert os.listdir(out) == []  # neither eval_4.json nor any temporary file
    monkeypatch.setattr(Synthesizer, "write_eval_file", real)
    reports = plan.run()
    assert sorted(os.listdir(out)) == ["eval_10.json", "eval_4.json"]
    assert [r.path for r in reports] == [str(out / "eval_4.json"), str(out / "eval_10.json")]


def _with_surrogate(tmp_path, where: str):
    rows = [make_example(i) for i in range(6)]
    if where == "question":
        rows[1]["question"] = "What is \ud800?"
    elif where == "context":
        rows[4]["context"][2][1][0] = "Broken \udc80 text."  # a distractor paragraph of row 5
    path = tmp_path / "q.json"
    path.write_text(json.dumps(rows))  # json escapes the surrogate as \\ud800: valid JSON, invalid Unicode
    return path


@pytest.mark.parametrize("where, row_field", [("question", "2:question"), ("context", "5:context")])
def test_lone_surrogate_is_one_line_naming_row_and_field(tmp_path, where, row_field):
    src = _with_surrogate(tmp_path, where)
    code, lines = synth("--input", src, "--docs", "4,10", "--out", tmp_path / "o")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {src}:{row_field}: contains a lone surrogate (U+")
    assert not (tmp_path / "o").exists() or not [n for n in os.listdir(tmp_path / "o") if n.startswith("eval")]


def test_lone_surrogate_past_max_samples_and_in_a_pool_file(tmp_path):
    src = _with_surrogate(tmp_path, "context")
    with pytest.raises(DataError, match=rf"{src}:5:context: contains a lone surrogate"):
        plan_synthesis(src, tmp_path / "o", [4], max_samples=2)  # row 5 feeds only the distractor pool
    clean = write_examples(tmp_path / "clean.json")
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"title": "ok", "text": "fine"}) + "\n"
                    + json.dumps({"title": "bad", "text": "x \ud834 y"}) + "\n")
    with pytest.raises(DataError, match=rf"{pool}:2:text: contains a lone surrogate \(U\+D834"):
        plan_synthesis(clean, tmp_path / "o", [4], pool_files=[pool])


def test_a_partial_rerun_says_what_it_replaces_and_what_stays(tmp_path):
    src = write_examples(tmp_path / "q.json")
    out = tmp_path / "o"
    code, lines = synth("--input", src, "--docs", "4,10", "--out", out)
    assert code == 0, lines
    assert not any(line.startswith("replacing") for line in lines)
    code, lines = synth("--input", src, "--docs", "4", "--max-samples", "2", "--out", out)
    assert code == 0, lines
    said = " ".join(" ".join(lines).split())
    assert (f"replacing eval_4.json in {out} (written by an earlier memrl data synth); left beside them from that "
            "run, with its settings: eval_10.json") in said
