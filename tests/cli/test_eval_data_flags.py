"""``memrl eval --data``/``--docs`` mistakes, each refused in one line that says what there is, leaving no folder."""

from __future__ import annotations

from tests.cli.test_folder_kinds import one_line_error
from tests.eval.helpers import needle_eval_dir


def test_docs_left_out_names_the_counts_the_folder_has(tmp_path):
    data = needle_eval_dir(tmp_path / "d", n=20, count=1)
    needle_eval_dir(data, n=50, count=1)
    out = tmp_path / "o"
    said = one_line_error(["eval", "--model", "tiny", "--data", data, "--out", out])
    assert "e.g. --docs 20,50" in said and "has eval files for 20, 50 documents" in said
    assert not out.exists()  # a refused eval leaves no folder of its own behind
    said = one_line_error(["eval", "--model", "tiny", "--data", tmp_path / "nothing_here", "--out", out])
    assert f"--data {tmp_path / 'nothing_here'}: no such folder" in said
    (tmp_path / "empty").mkdir()
    assert "has no eval_<N> files" in one_line_error(["eval", "--model", "tiny", "--data", tmp_path / "empty",
                                                      "--out", out])


def test_docs_with_one_file_of_samples_is_refused(tmp_path):
    data = needle_eval_dir(tmp_path / "d", n=20, count=1)
    said = one_line_error(["eval", "--model", "tiny", "--data", data / "eval_20.jsonl", "--docs", "50,abc",
                           "--out", tmp_path / "o"])
    assert "--docs applies to a folder of eval files" in said and "leave --docs out" in said
