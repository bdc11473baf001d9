"""A checkpoint in ``--state-dir`` is a file on disk, not trusted: its optimizer moments must fit the adapter."""

from __future__ import annotations

import pytest
import torch

from memrl.tinker.tenants import load_optimizer_state


def test_optimizer_moments_of_another_shape_are_refused_and_nothing_is_loaded():
    a, b = torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.AdamW([a, b])
    good = {"a::exp_avg": torch.ones(2, 3), "a::exp_avg_sq": torch.ones(2, 3), "a::step": torch.tensor(3.0)}
    with pytest.raises(ValueError, match=r"b::exp_avg has shape \(5,\), the adapter's \(4,\)"):
        load_optimizer_state(opt, {"a": a, "b": b}, {**good, "b::exp_avg": torch.ones(5)})
    assert not opt.state  # all or nothing: a's moments were not kept either
    load_optimizer_state(opt, {"a": a, "b": b}, good)
    assert torch.equal(opt.state[a]["exp_avg"], torch.ones(2, 3)) and float(opt.state[a]["step"]) == 3.0


def _save(state_dir, value, overwrite):
    from memrl.tinker import checkpoints as ckpt

    return ckpt.save(state_dir, "m1", "weights", "ck", {"w": torch.full((2,), value)}, None, {"base": "tiny"},
                     overwrite)


def test_an_overwrite_that_fails_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    from memrl.tinker import checkpoints as ckpt

    import safetensors.torch as st

    path = _save(tmp_path, 1.0, False)

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(st, "save_file", full_disk)
    with pytest.raises(OSError, match="No space left"):
        _save(tmp_path, 2.0, True)
    monkeypatch.undo()
    _, _, folder = ckpt.folder_of(tmp_path, path)
    assert torch.equal(ckpt.load(folder)[1]["w"], torch.full((2,), 1.0))
    assert sorted(p.name for p in folder.parent.iterdir()) == ["ck"]  # nothing staged or set aside is left


def test_a_server_killed_between_the_two_renames_gets_the_old_checkpoint_back_at_its_next_start(tmp_path):
    from memrl.tinker import checkpoints as ckpt

    path = _save(tmp_path, 1.0, False)
    _, _, folder = ckpt.folder_of(tmp_path, path)
    folder.rename(folder.with_name(".ck.old-1-2"))  # the old one set aside, the new one never renamed in
    (folder.parent / ".ck.new-1-2").mkdir()
    assert ckpt.recover(tmp_path) == [str(folder)]
    assert torch.equal(ckpt.load(ckpt.folder_of(tmp_path, path)[2])[1]["w"], torch.full((2,), 1.0))
    _save(tmp_path, 3.0, True)
    (folder.parent / ".ck.old-9-9").mkdir()  # killed after the new one landed: the old copy just goes
    assert ckpt.recover(tmp_path) == [] and sorted(p.name for p in folder.parent.iterdir()) == ["ck"]
    assert torch.equal(ckpt.load(folder)[1]["w"], torch.full((2,), 3.0))


def test_a_damaged_checkpoint_is_the_clients_400_naming_it(tmp_path):
    from types import SimpleNamespace

    from memrl.tinker import checkpoints as ckpt
    from memrl.tinker.samplers import _load

    path = _save(tmp_path, 1.0, False)
    _, _, folder = ckpt.folder_of(tmp_path, path)
    adapter = folder / "adapter.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:20])  # cut short, as a full disk or a crash elsewhere leaves it
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint ck is damaged \("):
        ckpt.load(folder)
    with pytest.raises(Exception) as err:
        _load(SimpleNamespace(state_dir=tmp_path, serves=lambda meta: True), path)
    assert getattr(err.value, "status", None) == 400 and "is damaged" in str(err.value)


def test_a_second_server_on_a_state_dir_in_use_is_refused_before_it_cleans_up(tmp_path):
    from memrl.data.runlock import FolderBusyError, hold_folder
    from memrl.tinker.server import serve

    staged = tmp_path / "runs" / "m1" / "weights" / ".ck.new-123-456"
    staged.mkdir(parents=True)  # a save the running server has in flight
    with hold_folder(tmp_path, "memrl tinker", "--state-dir", lambda msg: None):
        with pytest.raises(FolderBusyError, match=r"--state-dir .* is in use by memrl tinker"):
            serve("tiny", state_dir=str(tmp_path), port=65000, api_key="tml-local-123")
    assert staged.is_dir()
