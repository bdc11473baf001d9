"""``memrl data ruler`` run again keeps the files an earlier run wrote under the same settings."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from memrl.cli.main import app

ARGS = ["data", "ruler", "--tokenizer", "tiny", "--tasks", "niah_single_1,fwe", "--samples", "2", "--seed", "7"]


def _run(out, *extra, lengths="1k"):
    res = CliRunner().invoke(app, [*ARGS, "--lengths", lengths, "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return res.output


def test_a_second_run_keeps_every_file_and_the_same_report(tmp_path):
    out = tmp_path / "ruler"
    _run(out)
    first = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("ruler_*_1024.jsonl")}
    report = (out / "ruler_report.json").read_text()
    text = _run(out)
    assert text.count("kept ruler_") == 2
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("ruler_*_1024.jsonl")} == first
    assert (out / "ruler_report.json").read_text() == report


def test_an_added_length_is_written_alone_and_other_settings_write_again(tmp_path):
    out = tmp_path / "ruler"
    _run(out)
    text = _run(out, lengths="1k,2k")  # the 1k files kept, the 2k ones written
    assert text.count("kept ruler_") == 2 and (out / "ruler_fwe_2048.jsonl").is_file()
    report = json.loads((out / "ruler_report.json").read_text())
    assert sorted((r["task"], r["length"]) for r in report) == [("fwe", 1024), ("fwe", 2048),
                                                                 ("niah_single_1", 1024), ("niah_single_1", 2048)]
    assert "kept" not in _run(out, "--seed", "8")  # another seed: every file again
    res = CliRunner().invoke(app, [*ARGS[:-2], "--seed", "8", "--samples", "3", "--lengths", "1k", "--out", str(out)])
    assert res.exit_code == 0 and "kept" not in res.output


def test_a_file_changed_since_is_written_again(tmp_path):
    out = tmp_path / "ruler"
    _run(out)
    path = out / "ruler_fwe_1024.jsonl"
    path.write_text(path.read_text()[:-10])  # cut short, as an interrupted copy would leave it
    text = _run(out)
    assert text.count("kept ruler_") == 1 and "kept ruler_niah_single_1_1024.jsonl" in text
    assert len(path.read_text().splitlines()) == 2


def test_every_file_of_a_task_and_length_must_still_be_there(tmp_path):
    """MemAgent's protocol writes two files per task and length: its own eval_*.json gone, both are redone."""
    from memrl.cli.data_ruler_resume import RulerProgress, RunSettings

    settings = RunSettings.of("memagent", "tiny", "tiny", 2, 42, 1, {"--essay": None}, [])
    names = ["ruler_vt_4096.jsonl", "eval_vt_4096.json"]
    for n in names:
        (tmp_path / n).write_text("x")
    RulerProgress(tmp_path, settings).record("vt", 4096, names, {"path": names[0]})
    assert RulerProgress(tmp_path, settings).done("vt", 4096, names) == {"path": names[0]}
    assert RulerProgress(tmp_path, settings).done("vt", 2048, names) is None  # another length's key
    other = RunSettings.of("memagent", "tiny", "tiny", 2, 43, 1, {"--essay": None}, [])
    assert RulerProgress(tmp_path, other).done("vt", 4096, names) is None
    (tmp_path / names[1]).unlink()
    assert RulerProgress(tmp_path, settings).done("vt", 4096, names) is None
