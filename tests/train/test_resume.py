"""Kill a training process (SIGKILL) mid-run; the same command resumes without loss or duplicates."""

import json
import os
import signal
import subprocess
import sys
import time

import yaml

from tests.train.helpers import write_task


def run_cmd(cfg_path):
    return [sys.executable, "-m", "memrl.cli.main", "train", str(cfg_path)]


def write_config(tmp, name):
    cfg = {
        "model": {"path": "tiny"},
        "data": {"train_file": str(write_task(tmp / "train.jsonl"))},
        "workflow": {"chunk_tokens": 32, "memory_tokens": 3, "final_tokens": 4, "reward": "em"},
        "algorithm": {"n": 2, "entropy_coef": 0.05},  # entropy gives non-zero gradients: weights really move
        "trainer": {"lr": 1e-2, "total_steps": 6, "prompts_per_step": 2, "save_every": 2, "seed": 5,
                    "output_dir": str(tmp / name)},
        "engine": {"device": "cpu"},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def metrics(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    ref_cfg = write_config(tmp_path, "ref")
    r = subprocess.run(run_cmd(ref_cfg), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    reference = metrics(tmp_path / "ref")

    cfg = write_config(tmp_path, "killed")
    run = tmp_path / "killed"
    proc = subprocess.Popen(run_cmd(cfg), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:  # wait until step 3 is logged: checkpoint 2 exists, step 4 in flight
        if (run / "metrics.jsonl").is_file() and len(metrics(run)) >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(metrics(run)) < 6, "the run finished before it could be killed"

    r = subprocess.run(run_cmd(cfg), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "resumed from step" in r.stderr
    resumed = metrics(run)
    assert [m["step"] for m in resumed] == [1, 2, 3, 4, 5, 6]  # no duplicates, nothing lost
    for a, b in zip(resumed, reference):
        assert a["data_position"] == b["data_position"]  # the data order continues exactly
        assert abs(a["entropy"] - b["entropy"]) < 1e-4  # same weights, same samples, same RNG
        assert a["num_conversations"] == b["num_conversations"]
    assert not list((run / "checkpoints").glob(".*.tmp"))  # no half-written checkpoint left behind
