"""Atomic writes: a writer killed mid-write leaves a temp that the next write of that target removes."""

import os
import subprocess
import sys
import textwrap

from memrl.io.atomic import atomic_dir, atomic_path, atomic_write, temp_name, temp_target

KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from memrl.io.atomic import atomic_write
    with atomic_write(sys.argv[1]) as fh:
        fh.write("x" * 100_000)
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
""")


def _temps(folder):
    return sorted(n for n in os.listdir(folder) if temp_target(n) is not None)


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_temp_names_say_their_target():
    name = temp_name("eval_50.json")
    assert name.startswith(".eval_50.json.") and name.endswith(".tmp")
    assert temp_target(name) == "eval_50.json"
    assert temp_target(".eval_50.json.swp") is None and temp_target("eval_50.json") is None


def test_killed_write_is_cleaned_by_the_next_write_of_the_same_target(tmp_path):
    target = tmp_path / "eval_50.json"
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target)], capture_output=True)
    assert proc.returncode == -9
    leftover = _temps(tmp_path)
    assert len(leftover) == 1 and temp_target(leftover[0]) == "eval_50.json"
    assert not target.exists()
    # A fresh process (as a re-run is) writes the same target: the leftover goes.
    rerun = "import sys; from memrl.io.atomic import atomic_write\n" \
            "with atomic_write(sys.argv[1]) as fh: fh.write('done')"
    subprocess.run([sys.executable, "-c", rerun, str(target)], check=True)
    assert target.read_text() == "done" and _temps(tmp_path) == []


def test_only_dead_writers_of_the_same_target_are_removed(tmp_path):
    dead = _dead_pid()
    stale = tmp_path / f".a.json.memrl-{dead}-0123abcd.tmp"
    other_target = tmp_path / f".b.json.memrl-{dead}-0123abcd.tmp"
    live = tmp_path / f".a.json.memrl-{os.getppid()}-0123abcd.tmp"  # our parent is alive
    stale_dir = tmp_path / f".ckpt.memrl-{dead}-0123abcd.tmp"
    for p in (stale, other_target, live):
        p.write_text("x")
    (stale_dir / "inner").mkdir(parents=True)
    with atomic_write(tmp_path / "a.json") as fh:
        fh.write("new")
    assert not stale.exists() and other_target.exists() and live.exists()
    with atomic_path(tmp_path / "b.json") as p:
        p.write_text("b")
    assert not other_target.exists()
    with atomic_dir(tmp_path / "ckpt") as d:
        (d / "w").write_text("w")
    assert not stale_dir.exists() and (tmp_path / "ckpt" / "w").read_text() == "w"
    assert _temps(tmp_path) == [live.name]


def test_failed_write_leaves_nothing_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    try:
        with atomic_write(target) as fh:
            fh.write("new")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert target.read_text() == "old" and _temps(tmp_path) == []


def test_synth_rerun_removes_the_temp_a_killed_synth_left(tmp_path):
    """The reported case: an 86 MB ``.eval_N.json.*.tmp`` survived every later successful synth."""
    from memrl.data import plan_synthesis
    from tests.data.helpers import write_examples

    src = write_examples(tmp_path / "q.json")
    out = tmp_path / "out"
    out.mkdir()
    killed = out / f".eval_4.json.memrl-{_dead_pid()}-89abcdef.tmp"
    killed.write_text("[{\"context\": \"half")
    plan_synthesis(src, out, [4]).run()
    assert not killed.exists() and (out / "eval_4.json").is_file() and _temps(out) == []
