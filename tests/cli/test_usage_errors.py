"""The ``memrl`` console script answers a command-line mistake in one line on stderr, naming it, exit 2."""

from __future__ import annotations

import pytest

from memrl.cli.main import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    return stop.value.code, out, err


@pytest.mark.parametrize("argv, named", [
    (["eval", "--bogus"], "--bogus"),
    (["trian"], "'trian'. Did you mean 'train'?"),
    (["eval", "--trials", "x"], "'--trials'"),
    (["data", "nope"], "'nope'"),
])
def test_usage_mistake_is_one_line_naming_it(argv, named, capsys):
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and named in lines[0], err
    assert "--help" in lines[0] and "╭" not in err


def test_bare_group_shows_its_help_and_no_error_line(capsys):
    code, out, err = _run(["data"], capsys)
    assert code == 2
    assert "synth" in out + err and "error:" not in out + err


def test_success_exits_normally(capsys):
    assert main(["--version"]) is None  # typer.Exit(0) from --version: main returns, no SystemExit
    assert capsys.readouterr().out.startswith("memrl ")
