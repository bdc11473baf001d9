"""Output folders for exported models: refuse to mix into old ones, replace them whole when asked.

``atomic_dir`` alone keeps an existing target (it assumes a racing writer
produced the same thing), so exporting step 30 over an export of step 10 used
to leave step 10's weights in place and still report success.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from memrl.io.atomic import atomic_dir


def check_target(out: Path, force: bool) -> None:
    """Refuse a file, and a non-empty folder unless ``force`` (it will then be replaced as a whole)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is an existing file; choose a folder path")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ValueError(f"--out {out} is not empty; choose a new folder, or pass --force to replace it")


@contextlib.contextmanager
def replacing_dir(out: Path) -> Iterator[Path]:
    """Yield a temp folder that becomes ``out`` when the block succeeds, replacing any folder there.

    The old folder is moved aside only after the new one is complete and is
    put back if the final rename fails, so ``out`` is never left half-written.
    """
    aside: Path | None = None
    try:
        with atomic_dir(out) as tmp:
            yield tmp
            if out.exists():
                aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent)) / out.name
                out.rename(aside)
    except BaseException:
        if aside is not None and not out.exists():
            aside.rename(out)
        raise
    finally:
        if aside is not None and out.exists():
            shutil.rmtree(aside.parent, ignore_errors=True)
