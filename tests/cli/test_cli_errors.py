"""``memrl data synth`` refuses bad paths in one line, before reading or writing anything big."""

import json
import os

import pytest
from typer.testing import CliRunner

from memrl.cli.errors import describe
from memrl.data.outdir import MANIFEST
from tests.data.helpers import make_example, write_examples


def synth(*args):
    from memrl.cli.main import app

    r = CliRunner().invoke(app, ["data", "synth", *map(str, args)])
    lines = r.output.strip().splitlines()
    return r.exit_code, lines


def _error(code, lines):
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_out_pointing_at_a_file(tmp_path):
    f = tmp_path / "out.json"
    f.write_text("{}")
    # the input does not even exist: the output is checked first, before any reading
    line = _error(*synth("--input", tmp_path / "missing.json", "--docs", "5", "--out", f))
    assert line == f"error: --out {f} is a file, not a folder; pass a folder (it is created if missing)"


def test_read_only_output_folder(tmp_path, monkeypatch):
    src = write_examples(tmp_path / "q.json")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("memrl.data.outdir.tempfile.mkstemp", denied)
    line = _error(*synth("--input", src, "--docs", "5", "--out", tmp_path / "ro"))
    assert f"--out {tmp_path / 'ro'}: cannot write in {tmp_path} (Permission denied)" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a mode-0555 folder")
def test_read_only_output_folder_for_real(tmp_path):
    src = write_examples(tmp_path / "q.json")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert "cannot write in" in _error(*synth("--input", src, "--docs", "5", "--out", ro))
    finally:
        ro.chmod(0o755)


def test_folder_as_input(tmp_path):
    line = _error(*synth("--input", tmp_path, "--docs", "5", "--out", tmp_path / "o"))
    assert line == f"error: {tmp_path}: is a folder, expected a file (JSON, JSONL or parquet)"


def test_non_utf8_input_names_the_file(tmp_path):
    src = tmp_path / "latin1.json"
    src.write_bytes(json.dumps([make_example(0)]).encode().replace(b"answer 0", b"r\xe9ponse"))
    line = _error(*synth("--input", src, "--docs", "5", "--out", tmp_path / "o"))
    assert line.startswith(f"error: {src}: not UTF-8 text (byte 0xe9")


def test_train_tokens_larger_than_the_pool(tmp_path):
    src = write_examples(tmp_path / "q.json")
    line = _error(*synth("--input", src, "--train-tokens", "1m", "--out", tmp_path / "o"))
    assert "--train-tokens 1,048,576" in line and "the paragraph pool gives at most about" in line
    assert not (tmp_path / "o").exists()


def test_synth_records_what_it_wrote(tmp_path):
    src = write_examples(tmp_path / "q.json")
    code, lines = synth("--input", src, "--docs", "4,10", "--train-tokens", "100", "--out", tmp_path / "o")
    assert code == 0, lines
    entries = json.loads((tmp_path / "o" / MANIFEST).read_text())["entries"]
    assert entries == ["eval_10.json", "eval_4.json", "token_report.json", "train_100tok.parquet"]
    assert sorted(os.listdir(tmp_path / "o")) == sorted(entries + [MANIFEST])


def test_describe_path_errors():
    assert describe(PermissionError(13, "Permission denied", "/x/y")) == "/x/y: permission denied"
    assert describe(IsADirectoryError(21, "Is a directory", "/x")) == "/x: is a folder, expected a file"
    assert describe(FileNotFoundError("no eval_5.json in d")) == "no eval_5.json in d"


def test_a_ctrl_c_no_command_handled_says_so_and_exits_130():
    import typer

    from memrl.cli.errors import user_errors

    app = typer.Typer()

    @app.command()
    @user_errors
    def slow() -> None:
        raise KeyboardInterrupt  # as while a model loads

    r = CliRunner().invoke(app, [])
    assert r.exit_code == 130 and r.output.strip() == "interrupted (Ctrl-C)"


def test_a_full_disk_is_one_line_naming_the_file_and_other_os_errors_keep_their_trace():
    import errno

    import typer

    from memrl.cli.errors import user_errors

    app = typer.Typer()
    raised: list[OSError] = []

    @app.command()
    @user_errors
    def write() -> None:
        raise raised[0]

    raised.append(OSError(errno.ENOSPC, "No space left on device", "runs/x/metrics.jsonl"))
    r = CliRunner().invoke(app, [])
    assert r.exit_code == 2 and r.output.startswith("error: runs/x/metrics.jsonl: no space left on device; free")
    raised[0] = OSError(errno.EROFS, "Read-only file system", "ro/v.html")
    r = CliRunner().invoke(app, [])
    assert r.exit_code == 2 and r.output == "error: ro/v.html: read-only file system; write somewhere else\n"
    raised[0] = OSError(errno.EIO, "Input/output error", "runs/x/metrics.jsonl")
    r = CliRunner().invoke(app, [])
    assert r.exit_code == 1 and isinstance(r.exception, OSError) and r.exception.errno == errno.EIO


def test_an_interrupted_fine_tuning_says_nothing_was_written(tmp_path, capsys):
    import signal

    import typer

    from memrl.cli.sft import _stops_say_nothing_kept

    with pytest.raises(typer.Exit) as ended:
        with _stops_say_nothing_kept(tmp_path / "model"):
            raise KeyboardInterrupt
    assert ended.value.exit_code == 130
    assert f"nothing was written to {tmp_path / 'model'}" in capsys.readouterr().err
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(typer.Exit) as ended:
        with _stops_say_nothing_kept(tmp_path / "model"):
            signal.raise_signal(signal.SIGTERM)  # a container's stop: was a silent death
    assert ended.value.exit_code == 143 and signal.getsignal(signal.SIGTERM) == before


def test_a_pydantic_validation_error_is_one_line_naming_each_field():
    from memrl.cli.errors import describe
    from memrl.config import MemRLConfig

    with pytest.raises(Exception) as err:
        MemRLConfig.model_validate({"trainer": {"lr": "x"}, "model": 3})
    line = describe(err.value)
    assert "\n" not in line and "errors.pydantic.dev" not in line
    assert line.startswith("invalid MemRLConfig: model: ") and "trainer.lr: Input should be a valid number" in line
