"""Checkpoints and exported models follow the umask (a vLLM server running as another user must be able to
read them), instead of the 0700/0600 of the temporary folders they are built in."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from memrl.train import checkpoint
from memrl.train.policy import export_model


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _modes(root: Path) -> set[tuple[str, int]]:
    found = {("dir", stat.S_IMODE(root.stat().st_mode))}
    for p in root.rglob("*"):
        found.add(("dir" if p.is_dir() else "file", stat.S_IMODE(p.stat().st_mode)))
    return found


@pytest.fixture
def expected():
    mask = _umask()
    if mask & 0o077 == 0o077:
        pytest.skip("umask hides everything from others anyway")
    return {("dir", 0o777 & ~mask), ("file", 0o666 & ~mask)}


def test_checkpoint_folders_follow_the_umask(tmp_path, tiny_model, expected):
    model, _ = tiny_model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    dest = checkpoint.save(tmp_path, 1, model, opt, sched, {"data_position": 0})
    assert _modes(dest) == expected


def test_exported_model_follows_the_umask(tmp_path, tiny_model, expected):
    model, tok = tiny_model
    out = export_model(model, tok, tmp_path / "export")
    assert _modes(out) == expected
    export_model(model, tok, out, force=True)  # replacing a previous export too
    assert _modes(out) == expected
