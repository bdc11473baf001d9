"""Which file holds the eval samples for N documents.

``memrl data synth`` writes ``eval_{N}.{json,jsonl,parquet}``. ReMemR1's data
script writes ``eval_{dataset}_{N}.json`` (datasets ``hotpotqa`` and
``2wikimultihopqa``) and, for the samples whose evidence documents lie far
apart, ``eval_{dataset}_{N}_min_distance_{D}.json``. One folder often holds
both datasets, so ``--data`` may name more than a folder:

* a folder: ``eval_{N}.*`` if present, else the single ``eval_{dataset}_{N}.*``
  (two datasets for the same N is an error that names them; ``_min_distance_``
  files are only found by a pattern);
* a name prefix in a folder: ``data/test/eval_hotpotqa`` reads
  ``data/test/eval_hotpotqa_{N}.*``;
* a pattern with ``{n}``: ``data/test/eval_hotpotqa_{n}_min_distance_400.json``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

EXTENSIONS = ("json", "jsonl", "parquet")


def _first_file(paths: list[Path]) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def match_eval_file(data: Path, n: int) -> Path | None:
    """The eval file for ``n`` documents named by ``data`` (folder, name prefix or ``{n}`` pattern), or None.

    Raises ValueError when a folder holds files of several datasets for ``n``: picking one silently would
    report one dataset's accuracy under the other's name.
    """
    text = str(data)
    if "{n}" in text:
        return _first_file([Path(text.replace("{n}", str(n)))])
    if data.is_dir():
        own = _first_file([data / f"eval_{n}.{ext}" for ext in EXTENSIONS])
        if own is not None:
            return own
        pattern = re.compile(rf"eval_(?P<ds>.+)_{n}\.(?:{'|'.join(EXTENSIONS)})")
        found = sorted(p for p in data.iterdir()
                       if p.is_file() and pattern.fullmatch(p.name) and "_min_distance_" not in p.name)
        datasets = sorted({pattern.fullmatch(p.name).group("ds") for p in found})  # type: ignore[union-attr]
        if len(datasets) > 1:
            raise ValueError(
                f"{data} holds eval files of several datasets for {n} documents ({', '.join(p.name for p in found)}); "
                f"name one with a prefix, e.g. --data {data / ('eval_' + datasets[0])}, or a pattern such as "
                f"{data / ('eval_' + datasets[0] + '_{n}_min_distance_400.json')}")
        return found[0] if found else None
    if data.parent.is_dir() and data.name:
        return _first_file([data.parent / f"{data.name}_{n}.{ext}" for ext in EXTENSIONS])
    return None


def check_eval_file(path: Path) -> Path:
    """``path``, refused in one line when it is empty or does not start as JSON or JSONL records.

    A file that is not JSON scans as holding no records, so the eval printed "0 episodes" and
    exited 0, as if it had evaluated something. Only the first bytes are read (eval files may be
    gigabytes); parquet files are checked by their reader.
    """
    if path.suffix == ".parquet":
        return path
    with open(path, "rb") as fh:
        head = fh.read(1 << 16).lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head:
        raise ValueError(f"{path}: the eval file is empty (make it with memrl data synth)")
    if head[:1] not in (b"[", b"{"):
        raise ValueError(f"{path}: not a JSON or JSONL file of samples (it starts with {head[:20]!r})")
    return path


def data_record(path: Path) -> dict[str, str]:
    """What ``eval_config.yaml`` records of an eval's data: the file's absolute path and its content's sha256."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return {"file": str(Path(path).resolve()), "sha256": digest.hexdigest()}


def check_same_data(out: Path, was: dict[str, Any] | None, now: dict[str, Any]) -> None:
    """Refuse, in one line, to add results of other data to a folder (they would be averaged together)."""
    if not was or was == now:
        return
    if "file" not in was or "file" not in now:  # one file of samples, and a folder's eval_N files
        raise ValueError(f"--data: {out} holds results of {_named(was)}, not of {_named(now)}; use another --out, "
                         "or pass --restart to replace them")
    what = (f"{was.get('file')}, which has changed since (sha256 {str(was.get('sha256'))[:12]}, now "
            f"{now['sha256'][:12]})" if was.get("file") == now["file"] else f"{was.get('file')}, not {now['file']}")
    raise ValueError(f"--data: {out} holds results of {what}; use another --out, or pass --restart to replace them")


def _named(record: dict[str, Any]) -> str:
    """What a data record names, for a message: one file of samples, or the eval_N files of some sizes."""
    if "file" in record:
        return f"the file of samples {record['file']}"
    by_docs = record.get("by_docs") or {}
    sizes = sorted(by_docs, key=int)
    where = {str(Path(str((by_docs[n] or {}).get("file"))).parent) for n in sizes}
    return f"the eval files of --docs {','.join(sizes)} in {', '.join(sorted(where))}"


def merged_data(out: Path, was: dict[str, Any] | None, now: dict[str, Any]) -> dict[str, Any]:
    """The data record ``out`` keeps once this run's results join it, refusing (one line) data other than the
    recorded one.

    ``{"by_docs": {N: data_record}}`` (a folder of eval_N files) is checked per size: a size run before must
    come from the same file, unchanged (``--data DIR`` resumed stale results after DIR/eval_8.json changed);
    a size not run before joins the record, and one not run now keeps its entry.
    """
    if not was or "by_docs" not in now or "by_docs" not in was:
        check_same_data(out, was, now)
        return now
    kept = dict(was["by_docs"])
    for n, record in now["by_docs"].items():
        check_same_data(out, kept.get(n), record)
        kept[n] = record
    return {"by_docs": kept}
