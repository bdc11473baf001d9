"""Checkpoints are pickle-free and checksummed; a damaged one is skipped for the newest intact one."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from rich.console import Console

from memrl.models.resolve import load_tokenizer
from memrl.train import checkpoint
from memrl.train.checkpoint import CheckpointError
from memrl.train.manifest import problem, write_manifest
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config


class PlantedPickle:
    """Unpickling this creates ``marker``: proof that a loader ran code from the checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run with checkpoints at steps 1 and 2 (copied by each test, never changed)."""
    tmp = tmp_path_factory.mktemp("trained")
    Trainer(config(tmp), engine=coin_engine(load_tokenizer("tiny"))).run()
    return tmp


def copy_run(trained: Path, dest: Path) -> Path:
    """A copy of the trained run that resumes in ``dest`` (the recorded output_dir is updated)."""
    shutil.copytree(trained, dest)
    cfg_file = dest / "run" / "config.yaml"
    raw = yaml.safe_load(cfg_file.read_text())
    raw["trainer"]["output_dir"] = str(dest / "run")
    raw["data"]["train_file"] = str(dest / "train.jsonl")
    cfg_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    return dest


def resume(tmp: Path, total_steps: int = 3) -> tuple[Trainer, str]:
    out = io.StringIO()
    trainer = Trainer(config(tmp, trainer__total_steps=total_steps), engine=coin_engine(load_tokenizer("tiny")),
                      tracker_console=Console(file=out, width=400))
    return trainer, out.getvalue()


def test_checkpoint_holds_tensors_and_json_only(trained):
    ckpt = trained / "run" / "checkpoints" / "step_000002"
    names = sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file())
    assert {"manifest.json", "state.json", "trainer.json", "trainer.safetensors"} <= set(names)
    assert not [n for n in names if n.endswith((".pt", ".bin", ".pkl"))]
    assert all(n.endswith((".json", ".safetensors")) for n in names)
    assert checkpoint.verify(ckpt) is None


def test_planted_pickle_never_runs(trained, tmp_path):
    tmp = copy_run(trained, tmp_path / "x")
    marker = tmp_path / "code-ran"
    ckpts = tmp / "run" / "checkpoints"
    torch.save({"rng": PlantedPickle(marker)}, ckpts / "step_000002" / "trainer.pt")  # beside a valid checkpoint
    legacy = ckpts / "step_000003"  # and a checkpoint in the old pickled layout, the newest
    shutil.copytree(ckpts / "step_000002" / "model", legacy / "model")
    torch.save({"optimizer": {}, "rng": PlantedPickle(marker)}, legacy / "trainer.pt")
    (legacy / "state.json").write_text('{"step": 3, "data_position": 6}')

    trainer, log = resume(tmp, total_steps=4)
    assert not marker.exists()
    assert trainer.step == 2 and trainer.resumed_from == 2
    assert "step_000003" in log and "trainer.pt" in log and "pickle" in log


def test_only_a_pickled_checkpoint_is_refused_in_one_line(trained, tmp_path):
    tmp = copy_run(trained, tmp_path / "x")
    marker = tmp_path / "code-ran"
    ckpts = tmp / "run" / "checkpoints"
    shutil.rmtree(ckpts / "step_000002")
    for f in ("manifest.json", "trainer.json", "trainer.safetensors"):
        (ckpts / "step_000001" / f).unlink()
    torch.save({"rng": PlantedPickle(marker)}, ckpts / "step_000001" / "trainer.pt")
    with pytest.raises(CheckpointError) as err:
        resume(tmp)
    msg = str(err.value)
    assert "\n" not in msg and "step_000001" in msg and "trainer.pt" in msg
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncate trainer.safetensors", "truncate model", "corrupt state.json"])
def test_damaged_newest_checkpoint_falls_back(trained, tmp_path, damage):
    tmp = copy_run(trained, tmp_path / "x")
    newest = tmp / "run" / "checkpoints" / "step_000002"
    if damage == "truncate trainer.safetensors":
        victim = newest / "trainer.safetensors"
    elif damage == "truncate model":
        victim = next((newest / "model").glob("*.safetensors"))
    else:
        victim = newest / "state.json"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2] if damage.startswith("truncate") else b"{not json" + data[9:])

    trainer, log = resume(tmp)
    assert trainer.step == 1 and trainer.sampler.position == 2  # step 1's state, not step 2's
    assert "step_000002" in log and victim.name in log
    assert (newest.parent / "step_000002.damaged").is_dir() and not newest.exists()
    trainer.run()  # redoes steps 2 and 3; step 2 saves cleanly beside the set-aside folder
    steps = [s for s, _ in checkpoint.checkpoints(tmp / "run")]
    assert steps == [2, 3] and checkpoint.verify(newest) is None
    rows = (tmp / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [1, 2, 3]


def test_no_intact_checkpoint_is_one_line_naming_them(trained, tmp_path):
    tmp = copy_run(trained, tmp_path / "x")
    for step in ("step_000001", "step_000002"):
        (tmp / "run" / "checkpoints" / step / "trainer.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError) as err:
        resume(tmp)
    msg = str(err.value)
    assert "\n" not in msg and "step_000001" in msg and "step_000002" in msg and "trainer.safetensors" in msg


def test_manifest_catches_same_size_edits_and_missing_files(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "w.safetensors").write_bytes(b"abcdef")
    (tmp_path / "state.json").write_text("{}")
    assert problem(tmp_path) == "no manifest.json (the checkpoint was never finished)"
    write_manifest(tmp_path)
    assert problem(tmp_path, ("state.json", "model/")) is None
    assert "trainer.json" in problem(tmp_path, ("trainer.json",))
    (tmp_path / "model" / "w.safetensors").write_bytes(b"abcdeX")
    assert "sha256" in problem(tmp_path)
    (tmp_path / "state.json").unlink()
    assert "missing" in problem(tmp_path) or "sha256" in problem(tmp_path)
    (tmp_path / "manifest.json").write_text("{")
    assert problem(tmp_path) == "manifest.json is unreadable"


def test_rng_and_optimizer_round_trip_exactly():
    import random

    import numpy as np

    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    tensors, meta = checkpoint.rng_state()
    meta = json.loads(json.dumps(meta))  # as stored
    want = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    checkpoint.set_rng_state(tensors, meta)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == want

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    from memrl.dist.fsdp import full_optimizer_state

    state = full_optimizer_state(model, opt)
    flat, meta = checkpoint._split_optimizer(state)
    back = checkpoint._join_optimizer(flat, json.loads(json.dumps(meta)))
    assert back["param_groups"] == state["param_groups"]  # betas is a tuple again
    for name, entry in state["state"].items():
        for key, val in entry.items():
            assert torch.equal(back["state"][name][key], val)


@pytest.mark.parametrize("field, value, why", [("data_position", "abc", "data_position is 'abc', expected a whole "
                                                                        "number >= 0"),
                                               ("pending", [1, "x"], "pending is [1, 'x'], expected a list"),
                                               ("step", None, "step is None")])
def test_a_hand_edited_state_that_the_manifest_accepts_is_one_line(trained, tmp_path, field, value, why):
    """A state.json edited and re-manifested (another tool, a hand fix) fails naming the field, not in arithmetic."""
    tmp = copy_run(trained, tmp_path / "x")
    newest = tmp / "run" / "checkpoints" / "step_000002"
    state = json.loads((newest / "state.json").read_text())
    state[field] = value
    (newest / "state.json").write_text(json.dumps(state))
    write_manifest(newest)
    with pytest.raises(ValueError) as err:
        resume(tmp)
    assert f"step_000002: its trainer state does not read ({why}" in str(err.value)
