"""An agent program that exits, interrupts or cancels itself, or a command that leaves children behind or
prints without end, fails (or finishes) its own episode and nothing else."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest

from memrl.gateway.command import _Tail
from memrl.gateway.program import AgentProgramError
from tests.gateway.test_agent_workflow import episode

P = "tests.gateway.test_program_faults"


async def exits(client, sample):
    await client.completions.create(model="m", prompt="hi", max_tokens=1)
    sys.exit(3)


async def interrupts(client, sample):
    await client.completions.create(model="m", prompt="hi", max_tokens=1)
    raise KeyboardInterrupt


async def cancels(client, sample):
    await client.completions.create(model="m", prompt="hi", max_tokens=1)
    raise asyncio.CancelledError


@pytest.mark.parametrize("program,what", [("exits", "SystemExit: 3"), ("interrupts", "KeyboardInterrupt"),
                                          ("cancels", "CancelledError")])
def test_a_program_stopping_itself_fails_its_episode_only(gateway, tools_tokenizer, caplog, program, what):
    gc.collect()  # what earlier tests in this process left unretrieved is reported now, outside the window checked
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(AgentProgramError) as err:
            episode(gateway, tools_tokenizer, program=f"{P}:{program}")
        gc.collect()
    assert f"program {P}:{program} raised {what}" in str(err.value)
    assert "never retrieved" not in caplog.text
    assert episode(gateway, tools_tokenizer, program="tests.gateway.programs:two_calls").reward == 1.0


CALL = """
import json, os, subprocess, sys, time
from openai import OpenAI
sample = json.load(sys.stdin)
OpenAI().completions.create(model=os.environ["MEMRL_MODEL"], prompt="hi", max_tokens=1)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def _wait_dead(pid: int, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_background_child_holding_stdout_neither_stalls_nor_outlives_the_episode(gateway, tools_tokenizer,
                                                                                   tmp_path):
    script = tmp_path / "agent.py"
    pidfile = tmp_path / "child.pid"
    script.write_text(CALL + textwrap.dedent(f"""
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # inherits stdout
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print(json.dumps(0.5))
    """))
    start = time.perf_counter()
    traj = episode(gateway, tools_tokenizer, command=[sys.executable, str(script)], timeout_s=60)
    assert traj.reward == 0.5 and time.perf_counter() - start < 20  # not the 60 s timeout
    assert _wait_dead(int(pidfile.read_text())), "the command's child outlived the episode"


def test_a_timed_out_command_takes_its_children_with_it(gateway, tools_tokenizer, tmp_path):
    script = tmp_path / "agent.py"
    pidfile = tmp_path / "child.pid"
    script.write_text(CALL + textwrap.dedent(f"""
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(120)
    """))
    with pytest.raises(AgentProgramError, match="did not finish within 3 s"):
        episode(gateway, tools_tokenizer, command=[sys.executable, str(script)], timeout_s=3)
    assert _wait_dead(int(pidfile.read_text())), "the command's child outlived the episode"


def test_the_exit_status_is_in_the_first_line(gateway, tools_tokenizer, tmp_path):
    from memrl.train.rollout import one_line

    script = tmp_path / "agent.py"
    script.write_text("import sys\nfor i in range(30): print(f'line {i}', file=sys.stderr)\nsys.exit(4)")
    with pytest.raises(AgentProgramError) as err:
        episode(gateway, tools_tokenizer, command=[sys.executable, str(script)])
    lines = str(err.value).splitlines()
    assert "exited with status 4; stderr:" in lines[0] and lines[1:] == [f"line {i}" for i in range(10, 30)]
    assert one_line(err.value).endswith("exited with status 4; stderr: ... line 29")


def test_a_flood_of_output_is_not_held_in_memory(gateway, tools_tokenizer, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(CALL + textwrap.dedent("""
        block = ("x" * 999 + "\\n") * 1000
        for _ in range(40):  # 40 MB on each stream
            sys.stdout.write(block)
            sys.stderr.write(block)
        print("last words", file=sys.stderr)
        print(json.dumps({"reward": 1.0}))
    """))
    tracemalloc.start()
    try:
        traj = episode(gateway, tools_tokenizer, command=[sys.executable, str(script)], timeout_s=60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert traj.reward == 1.0 and peak < 16 << 20, f"peak {peak >> 20} MB"


def test_a_tail_keeps_the_last_lines_within_its_caps():
    tail = _Tail(keep=2, line_cap=8)
    for piece in (b"one\ntw", b"o\nthree-is-too-long", b"-still\nfour"):
        tail.feed(piece)
    assert tail.close() == [(b"three-is", True), (b"four", False)]
    assert len(tail.partial) == 0


HARD_EXIT = """
import asyncio, os, signal, sys, threading, time
from memrl.gateway.command import run_command
from memrl.train.signals import StopRequest

CODE = f"import os, time; open({sys.argv[1]!r}, 'w').write(str(os.getpid())); time.sleep(120)"

def episode():
    asyncio.run(run_command([sys.executable, "-c", CODE], dict(os.environ), b""))

threading.Thread(target=episode, daemon=True).start()
with StopRequest(30):
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
"""


def test_a_second_signal_kills_running_commands(tmp_path):
    pidfile = tmp_path / "command.pid"
    r = subprocess.run([sys.executable, "-c", HARD_EXIT, str(pidfile)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    assert _wait_dead(int(pidfile.read_text())), "a running command outlived the trainer's hard exit"
    assert "exiting now" in r.stderr


SIGKILLED = """
import asyncio, os, signal, sys, threading, time
from memrl.gateway import guardian
from memrl.gateway.command import run_command

CODE = f"import os, time; open({sys.argv[1]!r}, 'w').write(str(os.getpid())); time.sleep(120)"

def episode():
    asyncio.run(run_command([sys.executable, "-c", CODE], dict(os.environ), b""))

threading.Thread(target=episode, daemon=True).start()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
time.sleep(0.1)
print(guardian._watcher.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_trainer_killed_by_sigkill_takes_its_commands_with_it(tmp_path):
    """No cleanup runs in a SIGKILLed process: the watcher sees its pipe close and kills the groups."""
    pidfile = tmp_path / "command.pid"
    r = subprocess.run([sys.executable, "-c", SIGKILLED, str(pidfile)], capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert _wait_dead(int(pidfile.read_text())), "a running command outlived the SIGKILLed trainer"
    assert _wait_dead(int(r.stdout.split()[0])), "the watcher outlived the trainer"


def test_a_program_passed_as_a_function_object_is_told_its_import_path():
    from memrl.gateway.workflow import AgentWorkflow

    async def solve(client, sample):
        return 1.0

    with pytest.raises(ValueError, match=r"named by its import path, not passed as an object: "
                                         r"program='tests.gateway.test_program_faults:.*solve'"):
        AgentWorkflow(program=solve)


def test_a_timed_out_command_is_reaped_before_its_loop_closes():
    """The timeout's cancel used to cancel the 'exited' future itself, so the reaping wait was skipped and
    asyncio's child watcher logged "Loop ... that handles pid N is closed" once per timed-out episode."""
    script = textwrap.dedent("""
        import asyncio, sys, time
        from memrl.gateway.command import run_command

        async def main():
            try:
                async with asyncio.timeout(0.5):
                    await run_command([sys.executable, "-c", "import time; time.sleep(60)"], {}, b"")
            except TimeoutError:
                print("timed out", flush=True)

        asyncio.run(main())
        time.sleep(0.5)  # the watcher thread reports after the loop has closed
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "timed out\n"
    assert "that handles pid" not in r.stderr, r.stderr
