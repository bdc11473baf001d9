"""``memrl demo`` stopped by a signal ends like ``memrl train``: one line, exit 128 + signal, no traceback."""

import os
import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_demo_stops_with_one_line(tmp_path, sig):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "memrl.cli.main", "demo", "--out", str(tmp_path / "demo")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not (tmp_path / "demo" / "model_init" / "config.json").is_file():  # inside the warm start
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"{signal.Signals(sig).name}: stopped") and "re-run the same command" in last
    assert not (tmp_path / "demo" / "sft_model").exists()  # nothing half-written: the stage starts over
