"""Checksummed manifests: tell an intact checkpoint from a truncated or altered one.

``atomic_dir`` makes a checkpoint appear all at once, but a full disk, a copy
that stopped half-way or a file edited by hand can still damage it later. The
manifest lists every file with its size and sha256 and is written last, so a
folder whose manifest is missing, unreadable or disagrees with the files is
not resumed from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from memrl.io.atomic import atomic_write

MANIFEST = "manifest.json"
FORMAT = 2  # 1: pickled trainer.pt (no manifest); 2: safetensors + JSON


def sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path) -> None:
    """Record every file under ``folder``; call it after the last file is complete."""
    files = {rel: {"bytes": (folder / rel).stat().st_size, "sha256": sha256(folder / rel)} for rel in _files(folder)}
    with atomic_write(folder / MANIFEST) as fh:
        json.dump({"format": FORMAT, "files": files}, fh, indent=1)


def problem(folder: Path, required: Iterable[str] = ()) -> str | None:
    """Why ``folder`` cannot be trusted (a short phrase naming the file), or None when it is intact.

    ``required``: names (or ``dir/`` prefixes) the manifest must list, so a
    manifest that was itself cut short cannot vouch for a partial folder.
    """
    path = folder / MANIFEST
    if not path.is_file():
        if (folder / "trainer.pt").is_file():
            return ("trainer.pt is in the old pickle format, which is not loaded because unpickling can run "
                    "code (no manifest.json)")
        return "no manifest.json (the checkpoint was never finished)"
    try:
        files = json.loads(path.read_text())["files"]
        entries = {str(rel): (int(v["bytes"]), str(v["sha256"])) for rel, v in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        return f"{MANIFEST} is unreadable"
    for need in required:
        if not any(rel == need or (need.endswith("/") and rel.startswith(need)) for rel in entries):
            return f"{MANIFEST} does not list {need}"
    for rel, (size, digest) in entries.items():
        f = folder / rel
        if not f.is_file():
            return f"{rel} is missing"
        if f.stat().st_size != size:
            return f"{rel} has {f.stat().st_size} bytes, the manifest says {size} (truncated?)"
        if sha256(f) != digest:
            return f"{rel} does not match its sha256 in {MANIFEST}"
    return None
