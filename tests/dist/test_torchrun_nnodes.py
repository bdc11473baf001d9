"""The documented multi-node trainer launch (docs/guides/scale-out.md), on loopback: two torchrun "nodes" on one
machine, one gloo CPU rank each, train as one 2-rank run (rank 0 writes metrics and checkpoints, both finish)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from memrl.dist.ddp import free_port
from tests.train.helpers import config

TORCHRUN = Path(sys.executable).with_name("torchrun")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_torchrun_nnodes_2_on_loopback(tmp_path, tiny_model):  # tiny_model: built once, before both nodes read it
    cfg = config(tmp_path, trainer__total_steps=2, cluster__backend="gloo")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("WORLD_SIZE", None)
    nodes = [subprocess.Popen(
        [str(TORCHRUN), "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1",
         "--master-addr", "127.0.0.1", "--master-port", str(port),
         "-m", "memrl.cli.main", "train", str(path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=560) for p in nodes]
    for p, (out, err) in zip(nodes, outs):
        assert p.returncode == 0, err[-2000:]
    assert "done: step 2" in outs[0][0]
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert (tmp_path / "run" / "checkpoints" / "step_000002").is_dir()
