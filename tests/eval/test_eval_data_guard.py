"""``memrl eval`` never mixes or invents results: the data a folder holds results of is recorded and checked,
a file that is not samples is refused, and an episode that exits or interrupts itself fails alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from memrl import Episode, Workflow

W = "tests.eval.test_eval_data_guard"


class Echo(Workflow):
    """Reward 1 on even samples; a sample may ask to stop the process (code a user should not write, but may)."""

    async def run(self, ep: Episode) -> None:
        await ep.generate([1, 2], max_new_tokens=1)
        if ep.sample.get("exit"):
            sys.exit(2)
        if ep.sample.get("interrupt"):
            raise KeyboardInterrupt
        ep.reward(float(ep.sample["n"] % 2 == 0))


def memrl_eval(*args: object):
    from memrl.cli.main import app

    return CliRunner().invoke(app, ["eval", "--model", "tiny", "--workflow", f"{W}:Echo", "engine.device=cpu",
                                    *map(str, args)])


def samples(path: Path, n: int, **extra: object) -> Path:
    path.write_text("".join(json.dumps({"n": i, **(extra if i == 1 else {})}) + "\n" for i in range(n)))
    return path


def test_a_folder_refuses_results_of_other_data(tmp_path):
    a, b, out = samples(tmp_path / "a.jsonl", 4), samples(tmp_path / "b.jsonl", 6), tmp_path / "out"
    r = memrl_eval("--data", a, "--out", out)
    assert r.exit_code == 0, r.output
    recorded = yaml.safe_load((out / "eval_config.yaml").read_text())["data"]
    assert recorded["file"] == str(a.resolve()) and len(recorded["sha256"]) == 64
    r = memrl_eval("--data", b, "--out", out)
    assert r.exit_code == 2 and r.output.strip() == (f"error: --data: {out} holds results of {a.resolve()}, not "
                                                     f"{b.resolve()}; use another --out, or pass --restart to "
                                                     "replace them")
    samples(a, 5)  # the same file, changed
    r = memrl_eval("--data", a, "--out", out)
    assert r.exit_code == 2 and "which has changed since" in r.output and len(r.output.strip().splitlines()) == 1
    r = memrl_eval("--data", b, "--out", out, "--restart")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "results.json").read_text())["episodes"] == 6  # b's results only


@pytest.mark.parametrize("extra,name", [({"exit": True}, "SystemExit: 2"), ({"interrupt": True}, "KeyboardInterrupt")])
def test_an_episode_stopping_itself_fails_alone(tmp_path, extra, name):
    out = tmp_path / "out"
    r = memrl_eval("--data", samples(tmp_path / "a.jsonl", 3, **extra), "--out", out)
    assert r.exit_code == 0, r.output
    assert "1 failed" in r.output and json.loads((out / "results.json").read_text())["episodes"] == 2
    failure = json.loads((out / "failures" / "1.json").read_text())
    assert failure["error"].startswith(name) and failure["traceback"].count("Traceback") == 1


def test_a_missing_data_file_is_named(tmp_path):
    r = memrl_eval("--data", tmp_path / "missing.jsonl", "--out", tmp_path / "o")
    assert r.exit_code == 2 and r.output.strip() == f"error: --data {tmp_path / 'missing.jsonl'}: no such file"
    r = memrl_eval("--data", tmp_path / "nothing_here", "--out", tmp_path / "o")  # not a QA workflow: no prefix
    assert r.exit_code == 2 and "no such file" in r.output


@pytest.mark.parametrize("text,says", [("", "the eval file is empty"), ("  \n", "the eval file is empty"),
                                       ("hello world\n", "not a JSON or JSONL file of samples"),
                                       ("[]", "the eval file holds no samples")])
def test_a_qa_eval_file_that_holds_no_samples_is_an_error(tmp_path, text, says):
    from memrl.cli.main import app

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "eval_3.json").write_text(text)
    r = CliRunner().invoke(app, ["eval", "--model", "tiny", "--data", str(tmp_path / "data"), "--docs", "3",
                                 "--out", str(tmp_path / "o"), "engine.device=cpu"])
    assert r.exit_code != 0, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {tmp_path / 'data' / 'eval_3.json'}: {says}"), r.output


_SIGTERM = """
import asyncio, os, signal, sys, time
from pathlib import Path
from rich.console import Console
from memrl.cli.eval_common import run_with_progress
from memrl.gateway.command import run_command

class Engine:
    async def close(self):
        pass

CODE = f"import os, time; open({sys.argv[2]!r}, 'w').write(str(os.getpid())); time.sleep(120)"

async def run(started, advance):
    started(1, 0)
    asyncio.get_running_loop().call_later(1.5, os.kill, os.getpid(), signal.SIGTERM)
    await run_command([sys.executable, "-c", CODE], dict(os.environ), b"")

try:
    run_with_progress(Console(stderr=True, width=400), Path(sys.argv[1]), Engine(), run)
except BaseException as exc:
    print(f"{type(exc).__name__} {getattr(exc, 'exit_code', '')}", file=sys.stderr)
"""


def test_sigterm_stops_an_eval_and_its_agent_commands(tmp_path):
    import subprocess

    from tests.gateway.test_program_faults import _wait_dead

    pidfile = tmp_path / "command.pid"
    r = subprocess.run([sys.executable, "-c", _SIGTERM, str(tmp_path), str(pidfile)], capture_output=True, text=True,
                       timeout=60)
    # (asyncio's child watcher may log about the closed loop after it: only the exit line matters here)
    assert "Exit 143" in r.stderr.strip().splitlines(), r.stderr
    assert "interrupted — re-run the same command to resume" in r.stderr
    assert _wait_dead(int(pidfile.read_text())), "the agent command outlived the eval"


def test_max_samples_takes_the_first_k_of_one_file_of_samples(tmp_path):
    out = tmp_path / "out"
    r = memrl_eval("--data", samples(tmp_path / "a.jsonl", 6), "--out", out, "--max-samples", "2")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "results.json").read_text())["episodes"] == 2
    assert sorted(p.name for p in (out / "episodes").iterdir()) == ["0.json", "1.json"]
