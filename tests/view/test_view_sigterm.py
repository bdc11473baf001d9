"""SIGTERM to a command without a handler of its own (here ``memrl view`` serving): one line, exit 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def test_sigterm_ends_a_command_with_one_line(run_dir):
    proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "view", str(run_dir), "--tokenizer", "tiny"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        line = proc.stdout.readline()  # "memrl view: URL ...": serving
        assert line.startswith("memrl view: http://127.0.0.1:"), line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143
    last = err.strip().splitlines()[-1]
    assert last == "terminated (SIGTERM): nothing half-written (files are written whole or not at all)"
    assert "Traceback" not in err
