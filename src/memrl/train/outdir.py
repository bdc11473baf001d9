"""Output folders for exported models: refuse to mix into old ones, replace them whole when asked.

``atomic_dir`` alone keeps an existing target (it assumes a racing writer
produced the same thing), so exporting step 30 over an export of step 10 used
to leave step 10's weights in place and still report success.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from memrl.data.outdir import check_writable_dir
from memrl.io.atomic import atomic_dir


def check_target(out: Path, force: bool, inputs: Iterable[Path] = ()) -> None:
    """Refuse a file, a non-empty folder unless ``force`` (it will then be replaced as a whole), and a
    folder whose replacement would destroy what the command reads or where the user stands.

    ``--out . --force`` once emptied the working directory (input run included) and wrote nothing, and
    ``export RUN --out RUN --force`` replaced the run it exported with the model.
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is an existing file; choose a folder path")
    target = out.resolve()
    if target == Path.cwd().resolve() or target in Path.cwd().resolve().parents:
        raise ValueError(f"--out {out} is the folder you are in (or holds it); name a new folder for the model")
    for given in inputs:
        source = Path(given).resolve()
        if target == source or target in source.parents:
            raise ValueError(f"--out {out} {'is' if target == source else 'holds'} the input {given}; "
                             "choose another folder")
        if source in target.parents and target.is_dir() and any(target.iterdir()):
            raise ValueError(f"--out {out} is inside the input {given} and not empty; choose another folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ValueError(f"--out {out} is not empty; choose a new folder, or pass --force to replace it")
    check_writable_dir(out)  # a read-only place fails now, not after the model is loaded and merged


@contextlib.contextmanager
def replacing_dir(out: Path) -> Iterator[Path]:
    """Yield a temp folder that becomes ``out`` when the block succeeds, replacing any folder there.

    The old folder is moved aside only after the new one is complete and is
    put back if the final rename fails, so ``out`` is never left half-written.
    """
    out = out.resolve()  # "." has no name: the old folder's parking place must never be its parent
    parking: Path | None = None  # a fresh folder of our own, the only thing ever removed here
    aside: Path | None = None
    try:
        with atomic_dir(out) as tmp:
            yield tmp
            if out.exists():
                parking = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
                out.rename(parking / out.name)
                aside = parking / out.name
    except BaseException:
        if aside is not None and not out.exists():
            aside.rename(out)
        raise
    finally:
        if parking is not None and (aside is None or out.exists()):
            shutil.rmtree(parking, ignore_errors=True)
