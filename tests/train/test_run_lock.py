"""One run per folder: a second ``memrl train``/``memrl eval`` refuses in one line naming the holder; a
dead run's lock is taken over with a notice; checkpoints never move another writer's folder aside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from memrl.data.runlock import LOCK_NAME, FolderBusyError, hold_folder
from memrl.train import checkpoint
from memrl.train.checkpoint import CheckpointError
from tests.train.helpers import write_task

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from memrl.data.runlock import hold_folder
    with hold_folder(Path(sys.argv[1]), sys.argv[2], "--out", print):
        print("held", flush=True)
        time.sleep(60)
""")


@pytest.fixture
def held(tmp_path):
    """A separate process holding ``tmp_path/run``'s lock as 'memrl train'; yields (folder, pid)."""
    folder = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), "memrl train"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield folder, proc.pid
    finally:
        proc.kill()
        proc.wait()


def invoke(*args: str):
    from memrl.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_second_holder_is_refused_naming_the_first(held):
    folder, pid = held
    with pytest.raises(FolderBusyError) as err:
        with hold_folder(folder, "memrl eval", "--out", print):
            pass
    msg = str(err.value)
    assert "\n" not in msg and f"pid {pid}" in msg and "memrl train" in msg and "--out" in msg


def test_lock_of_a_dead_run_is_taken_over_with_a_notice(tmp_path):
    folder = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    folder.mkdir()
    (folder / LOCK_NAME).write_text(json.dumps({"command": "memrl train", "pid": dead, "host": os.uname().nodename,
                                                "started": 0}))
    notices: list[str] = []
    with hold_folder(folder, "memrl train", "trainer.output_dir", notices.append):
        mine = json.loads((folder / LOCK_NAME).read_text())
        assert mine["pid"] == os.getpid() and mine["command"] == "memrl train"
    assert len(notices) == 1 and f"pid {dead}" in notices[0] and "no longer running" in notices[0]
    assert "did not end cleanly (killed: out of memory, SIGKILL or a reboot" in notices[0]
    assert not (folder / LOCK_NAME).exists()  # a run that ends leaves the folder as it found it
    with hold_folder(folder, "memrl train", "trainer.output_dir", notices.append):  # released: no notice again
        pass
    assert len(notices) == 1


def test_memrl_train_refuses_a_folder_in_use(held, tmp_path):
    folder, pid = held
    cfg = {"data": {"train_file": str(write_task(tmp_path / "train.jsonl"))},
           "workflow": {"options": {"chunk_tokens": 32, "memory_tokens": 3, "final_tokens": 4, "reward": "em"}},
           "algorithm": {"n": 2}, "engine": {"device": "cpu"},
           "trainer": {"total_steps": 1, "prompts_per_step": 1, "output_dir": str(folder)}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    (folder / "online.json").write_text('{"url": "http://127.0.0.1:1"}\n')  # the live run's endpoint
    r = invoke("train", str(path))
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith("error: trainer.output_dir") and f"pid {pid}" in lines[0]
    assert not (folder / "metrics.jsonl").exists() and not (folder / "config.yaml").exists()
    assert (folder / "online.json").exists()


def test_a_dead_runs_endpoint_file_goes_before_the_model_loads(tmp_path):
    """A SIGKILLed online run left RUN/online.json naming its dead port; the next run kept advertising it for
    its whole start-up. The run that takes the folder removes it at once (this one then fails on its data)."""
    from memrl.io.endpoint_file import write_address

    folder = tmp_path / "run"
    written = write_address(folder, {"url": "http://127.0.0.1:1"})
    assert json.loads(written.read_text())["pid"] == os.getpid()  # whole JSON, with the writer's pid
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"data": {"train_file": str(tmp_path / "missing.jsonl")},
                                    "trainer": {"output_dir": str(folder)}}))
    r = invoke("train", str(path))
    assert r.exit_code != 0 and not written.exists(), r.output


def test_memrl_eval_refuses_an_out_in_use(held, tmp_path):
    folder, pid = held
    r = invoke("eval", "--workflow", "tool_agent", "--model", "tiny", "--domain", "library", "--out", str(folder))
    assert r.exit_code == 2, r.output
    assert f"pid {pid}" in r.output and "--out" in r.output
    assert not (folder / "eval_config.yaml").exists()


# -- checkpoints ----------------------------------------------------------------------------------
def _save(run: Path, step: int, tiny_model, keep: int = 2) -> Path:
    model, _ = tiny_model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return checkpoint.save(run, step, model, opt, sched, {"data_position": step}, keep=keep)


def test_save_refuses_to_move_an_existing_step_aside(tmp_path, tiny_model):
    theirs = tmp_path / "checkpoints" / "step_000003"
    theirs.mkdir(parents=True)
    (theirs / "marker").write_text("another writer's")
    with pytest.raises(CheckpointError, match="already exists"):
        _save(tmp_path, 3, tiny_model)
    assert (theirs / "marker").read_text() == "another writer's"
    assert not list(theirs.parent.glob("*.damaged*"))


def test_damaged_folders_are_pruned_with_their_steps(tmp_path, tiny_model):
    root = tmp_path / "checkpoints"
    for name in ("step_000001.damaged", "step_000002.damaged", "step_000002.damaged2", "step_000004.damaged"):
        (root / name).mkdir(parents=True)
    for step in (1, 2, 3):
        _save(tmp_path, step, tiny_model)
    left = sorted(p.name for p in root.iterdir())
    # steps 2 and 3 kept: step 1's damaged copy goes with step 1; 2's stay with 2; 4's is newer than anything
    assert left == ["step_000002", "step_000002.damaged", "step_000002.damaged2", "step_000003",
                    "step_000004.damaged"]
    _save(tmp_path, 4, tiny_model)
    assert sorted(p.name for p in root.iterdir()) == ["step_000003", "step_000004", "step_000004.damaged"]


def test_disk_full_during_a_checkpoint_is_one_line_and_loses_nothing(tmp_path, tiny_model, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    _save(tmp_path, 1, tiny_model)

    def full(*args, **kwargs):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                              'message: "No space left on device" })')

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(CheckpointError) as err:
        _save(tmp_path, 2, tiny_model)
    msg = str(err.value)
    assert "\n" not in msg and "no space left" in msg and "step_000001" in msg and "re-run" in msg
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step_000001"]  # no half-written folder left behind
    assert checkpoint.select(tmp_path, warn=print)[0] == 1  # resume works from the last complete one


def test_a_run_refused_before_writing_leaves_no_empty_folders(tmp_path):
    path = tmp_path / "c.yaml"
    out = tmp_path / "runs" / "exp1"
    path.write_text(yaml.safe_dump({"data": {"train_file": str(tmp_path / "missing.jsonl")},
                                    "trainer": {"output_dir": str(out)}}))
    r = invoke("train", str(path))
    assert r.exit_code != 0 and not (tmp_path / "runs").exists(), r.output
