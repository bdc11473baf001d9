"""The shell tool's process runner: subprocess.run's result below the cap, a stopped command above it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memrl.envs.domains.banking_knowledge.capped_run import CUT_NOTE, capped_run

COMMANDS = ["echo hello", "printf 'a\\r\\nb\\rc'", "echo out; echo err >&2; exit 3", "true", "printf ''",
            "printf 'caf\\303\\251 \\342\\202\\254'", "seq 1 20000", "cat INDEX.md 2>&1; exit 2"]


@pytest.mark.parametrize("command", COMMANDS)
def test_below_the_cap_the_result_is_subprocess_runs(command, tmp_path):
    argv = ["sh", "-c", command]
    want = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    got = capped_run(argv, timeout=30, cwd=tmp_path)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


def test_undecodable_output_fails_as_subprocess_run_does(tmp_path):
    argv = ["sh", "-c", "printf '\\377\\376'"]
    with pytest.raises(UnicodeDecodeError) as want:
        subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    with pytest.raises(UnicodeDecodeError) as got:
        capped_run(argv, timeout=30, cwd=tmp_path)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("command", ["yes", "yes | cat", "cat /dev/zero | tr '\\0' x"])
def test_endless_output_is_cut_and_the_command_stopped(command, tmp_path):
    """τ³ keeps all of it: 30 s of ``yes`` is tens of GB. Here the first bytes, then a note; the pipeline dies."""
    done = capped_run(["sh", "-c", command], timeout=60, cwd=tmp_path, limit=10_000)
    note = CUT_NOTE.format(limit=10_000)
    assert done.stdout.endswith(note) and len(done.stdout) == 10_000 + len(note)
    assert done.returncode != 0  # killed


@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_timeout_raises_as_subprocess_run_and_stops_the_children(tmp_path):
    marker = tmp_path / "still_running"
    with pytest.raises(subprocess.TimeoutExpired):
        capped_run(["sh", "-c", f"(sleep 1; touch {marker}) & sleep 30"], timeout=0.3, cwd=tmp_path)
    subprocess.run(["sleep", "1.5"])
    assert not marker.exists()  # the background child was killed with its group


def test_a_background_child_holding_the_output_is_a_timeout_as_in_subprocess_run(tmp_path):
    """The shell exits at once but its background ``sleep`` keeps stdout open: subprocess.run's communicate()
    waits for the pipe until the timeout too; here the whole group is then stopped."""
    argv = ["sh", "-c", "sleep 30 & echo started"]
    with pytest.raises(subprocess.TimeoutExpired):
        capped_run(argv, timeout=0.5, cwd=tmp_path)
