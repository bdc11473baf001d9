"""``memrl eval`` as a user runs it: bad flags, a server that says 401, Ctrl-C, --restart on a user's folder."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from memrl.engines.base import EngineDeadError
from tests.eval.helpers import FakeServer, needle_eval_dir, tokenizer_dir


def memrl(*args, **kw):
    return subprocess.run([sys.executable, "-m", "memrl.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalrobust")
    return needle_eval_dir(root / "data", count=2), tokenizer_dir(root / "tok")


def _openai_args(data, tok, url, out):
    return ["eval", "--model", tok, "--engine", "openai", "--base-url", url, "--data", data, "--docs", "3",
            "--out", out, "--concurrency", "1", "engine.retries=0"]


def _one_line_error(r, code=2):
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def _in_process(*args):
    from memrl.cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("k", ["0", "-1"])
def test_max_samples_below_one_is_refused(tmp_path, setup, k):
    data, tok = setup
    r = _in_process("eval", "--model", tok, "--data", data, "--docs", "3", "--out", tmp_path / "o", "--max-samples", k)
    assert r.exit_code == 2 and r.output.strip() == f"error: --max-samples must be >= 1 (leave it out for all " \
                                                    f"samples), got {k}"
    assert not (tmp_path / "o").exists()


def test_out_that_is_a_file_is_refused_before_loading(tmp_path, setup):
    data, tok = setup
    f = tmp_path / "results"
    f.write_text("x")
    r = _in_process("eval", "--model", tok, "--data", data, "--docs", "3", "--out", f)
    assert r.exit_code == 2 and r.output.strip().startswith(f"error: --out {f} is a file, not a folder")


def test_unauthorized_server_is_a_failure_not_a_result_and_is_retried(tmp_path, setup):
    data, tok = setup
    out = tmp_path / "ev"
    with FakeServer("unauthorized") as server:
        r = memrl(*_openai_args(data, tok, server.url, out))
        assert r.returncode == 1, r.stderr
        assert "all 2 episodes of this run failed" in r.stderr and "HTTP 401" in r.stderr
        assert "Traceback" not in r.stderr
        res = json.loads((out / "results.json").read_text())["by_docs"]["3"]
        assert (res["finished"], res["failed"], res["sub_em"]) == (0, 2, None)
        assert not list((out / "episodes").glob("*/*.json"))

        server.mode = "ok"  # the key is fixed: the same command retries both episodes
        r = memrl(*_openai_args(data, tok, server.url, out))
    assert r.returncode == 0, r.stderr
    assert "resuming" not in r.stderr
    res = json.loads((out / "results.json").read_text())["by_docs"]["3"]
    assert (res["finished"], res["failed"]) == (2, 0)


def test_ctrl_c_keeps_finished_episodes_and_says_how_to_resume(tmp_path, setup):
    data, tok = setup
    out = tmp_path / "ev"
    # one chunk per document: 2 requests per episode; the third request (second episode) hangs
    with FakeServer("ok", hold_after=2) as server:
        proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main",
                                 *map(str, _openai_args(data, tok, server.url, out))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_hear_ctrl_c)
        first = out / "episodes" / "3" / "0.json"
        deadline = time.monotonic() + 240
        while not (first.is_file() and server.requests > 2) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"eval ignored Ctrl-C for 120 s; its stderr: {proc.communicate()[1]}")
        assert proc.returncode == 130, err
        assert "interrupted — re-run the same command to resume" in err and "Traceback" not in err
        assert json.loads(first.read_text())["docs"] == 3
        assert (out / "transcripts" / "3" / "0.txt").is_file()
        server.release.set()
        server.hold_after = None
        r = memrl(*_openai_args(data, tok, server.url, out))
    assert r.returncode == 0, r.stderr
    assert "resuming: 1 of 2 episodes already done" in r.stderr


# A thread other than the main one takes the SIGINT (POSIX lets the kernel pick any thread: torch and tokenizers
# start several), while the loop waits on a 60 s timer as the OpenAI engine waits for a held answer.
def _hear_ctrl_c() -> None:
    """The child takes SIGINT as a terminal's Ctrl-C even when the suite runs as a background job (``make test &``:
    the shell ignores SIGINT there, the child inherits that and Python then installs no KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_SIGINT_ON_A_THREAD = """
import asyncio, signal, sys, threading, time
from pathlib import Path
from rich.console import Console
from memrl.cli.eval_common import run_with_progress

class Engine:
    async def close(self):
        print("engine closed", file=sys.stderr)

def ctrl_c_on_this_thread():
    time.sleep(0.5)  # the main thread is in epoll_wait by now
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

async def run(started, advance):
    started(1, 0)
    threading.Thread(target=ctrl_c_on_this_thread).start()
    await asyncio.sleep(60)

t0 = time.monotonic()
try:
    run_with_progress(Console(stderr=True, width=400), Path(sys.argv[1]), Engine(), run)
except BaseException as exc:
    print(f"{type(exc).__name__} {getattr(exc, 'exit_code', '')} after {time.monotonic() - t0:.0f}s", file=sys.stderr)
"""


def test_ctrl_c_taken_by_another_thread_still_stops_eval_at_once(tmp_path):
    r = subprocess.run([sys.executable, "-c", _SIGINT_ON_A_THREAD, str(tmp_path)], capture_output=True, text=True,
                       timeout=120, preexec_fn=_hear_ctrl_c)
    lines = r.stderr.strip().splitlines()
    assert lines[-3:-1] == ["engine closed", f"interrupted — re-run the same command to resume (finished episodes "
                                             f"are kept in {tmp_path})"], r.stderr
    exc, code, _, seconds = lines[-1].split()
    assert (exc, code) == ("Exit", "130") and int(seconds[:-1]) < 30, r.stderr  # not the 60 s timer running out


def test_restart_deletes_only_what_eval_wrote(tmp_path, setup):
    data, tok = setup
    with FakeServer("ok") as server:
        args = _openai_args(data, tok, server.url, tmp_path)  # --out . in a project folder
        (tmp_path / "notes.txt").write_text("mine")
        assert memrl(*args).returncode == 0
        line = _one_line_error(memrl(*args, "--restart"))
        assert str(tmp_path) in line and "'notes.txt'" in line
        assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "results.json").is_file()

        (tmp_path / "notes.txt").unlink()
        r = memrl(*args, "--restart")
        assert r.returncode == 0, r.stderr
        assert "resuming" not in r.stderr
        assert sorted(os.listdir(tmp_path)) == sorted([".memrl-output", "accuracy.png", "episodes",
                                                       "eval_config.yaml", "results.json", "results.md",
                                                       "rollouts", "transcripts"])


def test_dead_engine_exits_1_with_one_line(tmp_path, setup, monkeypatch):
    data, tok = setup

    class Dead:
        async def generate(self, prompt_ids, params):
            raise EngineDeadError("the server process exited")

        async def close(self):
            return None

    monkeypatch.setattr("memrl.engines.factory.build_engine", lambda cfg: Dead())
    r = _in_process("eval", "--model", tok, "--data", data, "--docs", "3", "--out", tmp_path / "o")
    assert r.exit_code == 1, r.output
    assert "error: the engine is gone (the server process exited); stopped." in " ".join(r.output.split())
    assert not list((tmp_path / "o" / "failures").glob("*/*"))
