"""``memrl plot`` on a run it cannot write into: one line that says where to write instead."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app


@contextlib.contextmanager
def read_only(folder):
    """``folder`` made read-only for this process: a read-only bind mount as root, mode 0555 otherwise."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    view = folder.parent / (folder.name + "_ro")
    view.mkdir()
    r = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(view)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here: {r.stderr.decode().strip()}")
    try:
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward": 0.25}\n{"step": 2, "reward": 0.5}\n')
    return run


def test_plot_of_a_read_only_run_is_one_line(run, tmp_path):
    with read_only(run) as ro:
        r = CliRunner().invoke(app, ["plot", str(ro)])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert r.output.strip().splitlines() == [
            f"error: {ro / 'curves.png'}: cannot write the plot "
            f"({'read-only file system' if os.geteuid() == 0 else 'permission denied'}); "
            "write the plot elsewhere with --out PATH"]
        r = CliRunner().invoke(app, ["plot", str(ro), "--out", str(tmp_path / "c.png")])
        assert r.exit_code == 0 and (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
        assert not list(ro.iterdir())[1:]  # nothing left behind in the run


def test_a_read_only_file_system_error_is_one_line_wherever_it_comes_from(run, monkeypatch):
    def refuse(run_dirs, out, keys, smooth):
        raise OSError(errno.EROFS, "Read-only file system", str(out))

    monkeypatch.setattr("memrl.train.plots.plot_runs", refuse)
    r = CliRunner().invoke(app, ["plot", str(run), "--out", str(run / "x.png")])
    assert r.exit_code == 2 and r.output.strip() == f"error: {run / 'x.png'}: cannot write the plot (read-only file system)"
