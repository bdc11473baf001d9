"""Output folders memrl owns: a manifest of what it wrote, so "start over" deletes only that.

``memrl eval --restart`` and ``memrl demo --fresh`` used to ``rmtree`` the whole ``--out``
folder, and ``--out .`` would have deleted the user's working directory. Every command that
writes into a folder now records the top-level names it writes in ``OUT/.memrl-output``
(before writing them, so a killed run is still covered), with the command that wrote each one.
Starting over deletes exactly the entries of the command that starts over, plus atomic-write
leftovers of them; entries other memrl commands wrote there stay (``memrl eval --out DATA --restart``
once deleted the ``eval_N.json`` files ``memrl data synth`` had written in the same folder, its own
input). It refuses, changing nothing, if the folder holds anything memrl did not write. The folder
itself is never removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from memrl.io.atomic import atomic_write, temp_target
from memrl.data.runlock import LOCK_NAME

MANIFEST = ".memrl-output"


class OutputDirError(ValueError):
    """An output folder memrl cannot use or must not touch; the message says which and why."""


def check_writable_dir(out: Path, flag: str = "--out") -> None:
    """Fail now, in one line, if ``out`` is not (and cannot become) a folder we can write in.

    Probed by creating a file rather than with ``os.access``, which says yes to root on a
    read-only mount. Called before models load or inputs are read, so a typo costs nothing.
    """
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"{flag} {out} is a file, not a folder; pass a folder (it is created if missing)")
    probe_in = out
    while not probe_in.exists() and probe_in.parent != probe_in:
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise OutputDirError(f"{flag} {out}: {probe_in} is a file, so the folder cannot be created")
    try:
        fd, name = tempfile.mkstemp(prefix=".memrl-write-test.", dir=probe_in)
    except OSError as err:
        raise OutputDirError(f"{flag} {out}: cannot write in {probe_in} ({err.strerror or err}); "
                             "pass a writable folder") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)


def _is_plain_name(name: object) -> bool:
    """Only direct children may be listed: a tampered manifest must not reach outside the folder."""
    return (isinstance(name, str) and name not in ("", ".", "..", MANIFEST, LOCK_NAME)
            and "/" not in name and "\\" not in name)


def _read_manifest(out: Path) -> dict[str, set[str]] | None:
    """Each recorded name -> the commands that recorded it (empty: a manifest from before owners were kept);
    ``None`` when there is no readable manifest."""
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    names = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(names, list):
        return None
    owners = data.get("owners") if isinstance(data.get("owners"), dict) else {}
    return {n: {str(o) for o in owners.get(n) or () if isinstance(o, str)}
            for n in names if _is_plain_name(n)}


def recorded_owners(out: Path) -> dict[str, set[str]] | None:
    """Each name memrl recorded writing in ``out`` -> the commands that wrote it; ``None`` without a manifest."""
    return _read_manifest(out)


def recorded_entries(out: Path) -> set[str] | None:
    """Names memrl recorded writing in ``out``; ``None`` when there is no readable manifest."""
    manifest = _read_manifest(out)
    return None if manifest is None else set(manifest)


def _write_manifest(out: Path, manifest: dict[str, set[str]]) -> None:
    owners = {n: sorted(o) for n, o in sorted(manifest.items()) if o}
    with atomic_write(out / MANIFEST) as fh:
        json.dump({"written_by": "memrl", "entries": sorted(manifest), "owners": owners}, fh, indent=1)
        fh.write("\n")


def record_outputs(out: Path, names: Iterable[str], by: str | None = None, written: bool | Iterable[str] = False,
                   legacy: tuple[Iterable[str], str] | None = None) -> None:
    """Create ``out`` if needed and add ``names`` (top-level entries about to be written by command ``by``,
    e.g. ``"memrl eval"``) to its manifest; refused if one exists that memrl did not write (``written``: the
    command just wrote them itself, all or the names given; ``legacy``: the layout an older memrl left without
    a manifest, as :func:`clear_outputs` reads it)."""
    names = set(names)
    bad = [n for n in names if not _is_plain_name(n)]
    if bad:
        raise ValueError(f"output names must be plain file names, got {bad[0]!r}")
    out.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(out)
    if manifest is None and legacy is not None and _is_legacy(out, legacy):
        manifest = {n: set() for n in legacy[0]}
    manifest = manifest or {}
    mine = set(names) if written is True else set() if written is False else set(written)
    refuse_foreign(out, names - mine, manifest)
    if all(n in manifest and (by is None or by in manifest[n]) for n in names) and (out / MANIFEST).is_file():
        return
    for name in names:
        manifest.setdefault(name, set()).update({by} if by else set())
    _write_manifest(out, manifest)


def entry_owners(name: str, manifest: dict[str, set[str]]) -> set[str] | None:
    """The commands that wrote top-level entry ``name`` of a folder with this manifest (empty: written without a
    recorded owner, or memrl's own bookkeeping); ``None`` when memrl did not write it. A killed atomic write
    (a temp name) belongs to whoever wrote its target, so both "start over" and "--force" treat it alike."""
    if name in (MANIFEST, LOCK_NAME):
        return set()
    if name in manifest:
        return manifest[name]
    target = temp_target(name)
    if target == MANIFEST:
        return set()
    return manifest.get(target) if target is not None else None


def refuse_foreign(out: Path, names: Iterable[str], manifest: dict[str, set[str]] | None = None) -> None:
    """OutputDirError naming the first of ``names`` that exists in ``out`` but is not in its manifest."""
    manifest = (_read_manifest(out) or {}) if manifest is None else manifest
    foreign = sorted(n for n in names if n not in manifest and os.path.lexists(out / n))
    if foreign:
        raise OutputDirError(f"{out / foreign[0]} exists and memrl did not write it (or wrote it before it kept "
                             "a record); move it away or pass another folder (memrl never overwrites what it did not "
                             "write)")


def _is_legacy(out: Path, legacy: tuple[Iterable[str], str]) -> bool:
    """Whether ``out`` holds only ``legacy``'s names and its signature file (a relative path only that command
    writes): a folder an older memrl wrote before it kept a manifest."""
    names, signature = set(legacy[0]), legacy[1]
    return (out / signature).is_file() and set(os.listdir(out)) - {LOCK_NAME} <= names


def clear_outputs(out: Path, flag: str, legacy: tuple[Iterable[str], str] | None = None,
                  by: str | None = None, keep: tuple[str, ...] = ()) -> int:
    """Delete what command ``by`` wrote in ``out`` (every command's when ``by`` is None, and names recorded
    without an owner always); keep what other memrl commands wrote, and ``keep`` (what the command starting
    over has just written itself); refuse if anything else is there. Returns entries removed.

    A missing or empty folder is fine. A folder with entries but no manifest (written by hand,
    or by a memrl older than the manifest) is refused like any folder with foreign entries,
    unless ``legacy=(names, signature)`` recognises the layout an older memrl left: no manifest,
    only those names, and the ``signature`` file (a relative path only that command writes)
    present. ``make demo`` runs ``--fresh`` on every call, so without this an upgrade would
    turn it into an error for anyone who ran it before.
    """
    if not out.exists():
        return 0
    if not out.is_dir():
        raise OutputDirError(f"{flag}: {out} is a file, not a folder; refusing to delete it")
    names = sorted(os.listdir(out))
    manifest = _read_manifest(out)
    if manifest is None and legacy is not None and _is_legacy(out, legacy):
        manifest = {n: set() for n in legacy[0]}
    manifest = manifest or {}
    foreign = [n for n in names if entry_owners(n, manifest) is None and n not in keep]
    if foreign:
        count = f"{len(foreign)} such entr{'y' if len(foreign) == 1 else 'ies'}"
        raise OutputDirError(f"{flag}: refusing to delete the contents of {out}: it holds {foreign[0]!r}, "
                             f"which memrl did not write ({count}); remove them yourself or choose another --out")
    others = {n: o for n, o in manifest.items() if by is not None and o and by not in o}
    doomed = [n for n in names if n not in (MANIFEST, LOCK_NAME, *keep)  # the lock: held by the run clearing it
              and n not in others and temp_target(n) not in others]
    for name in doomed:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    if others:
        _write_manifest(out, others)
    else:
        with contextlib.suppress(FileNotFoundError):
            (out / MANIFEST).unlink()
    return len(doomed)
