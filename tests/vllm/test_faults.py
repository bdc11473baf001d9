"""A vLLM engine killed under a running eval or training: one line naming the engine, finished work kept."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm", reason="vLLM not installed: `make test-vllm` runs these with vLLM's CPU build")

import yaml  # noqa: E402

from tests.vllm.conftest import VLLM_OVERRIDES  # noqa: E402
from tests.vllm.helpers import MEMAGENT, qa_file, train_config  # noqa: E402


def kill_vllm_when(proc: subprocess.Popen, ready, what: str) -> str:
    """Once ``ready()`` holds, SIGKILL vLLM's processes under ``proc``; return its stderr after it exits."""
    import psutil

    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.5)
        assert proc.poll() is None, f"{what} ended before the engine was killed: " + proc.communicate()[1][-3000:]
        for child in psutil.Process(proc.pid).children(recursive=True):  # vLLM's engine core and worker
            child.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err


def test_killed_engine_stops_eval_with_an_error(tmp_path):
    data = tmp_path / "data"
    qa_file(data / "eval_3.jsonl", 200, words=400)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "eval", "--model", "tiny32", "--engine", "vllm",
                             "--data", data, "--docs", "3", "--out", out, "--concurrency", "2", "model.dtype=float32",
                             *VLLM_OVERRIDES[3:], *MEMAGENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    err = kill_vllm_when(proc, lambda: (out / "episodes").is_dir() and any((out / "episodes").rglob("*.json")),
                         "eval")
    assert proc.returncode not in (0, None), err[-3000:]
    assert "engine" in err.lower() and "Traceback" not in err, err[-3000:]
    assert any((out / "episodes").rglob("*.json"))  # finished episodes stay on disk


def test_killed_engine_stops_training_with_an_error(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(train_config(tmp_path, 200)))
    proc = subprocess.Popen([sys.executable, "-m", "memrl.cli.main", "train", path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    err = kill_vllm_when(proc, lambda: metrics.is_file() and metrics.read_text().count("\n") >= 1, "train")
    assert proc.returncode not in (0, None), err[-3000:]
    assert "engine" in err.lower() and "Traceback" not in err, err[-3000:]
    assert (tmp_path / "run" / "checkpoints").is_dir()  # the steps it finished are kept
