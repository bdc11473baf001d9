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

import re
from pathlib import Path

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
