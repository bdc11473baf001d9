"""Whether a file memrl is about to replace is one memrl wrote: a page or a plot the user named with ``--out``.

Why: ``memrl view --out report.html`` or ``memrl plot --out figure.png`` used to replace whatever had that name;
a figure the user made elsewhere was gone. A page memrl wrote says so in its title, a plot in its PNG metadata;
anything else is replaced only with ``--force``.
"""

from __future__ import annotations

from pathlib import Path

PNG_METADATA = {"Software": "memrl"}  # savefig(metadata=...): what marks a plot as memrl's
PAGE_MARK = "<title>memrl view"


def written_by_memrl(path: Path) -> bool:
    """A page (its title) or a plot (its PNG ``Software`` text) memrl wrote; anything unreadable is not."""
    try:
        if path.suffix.lower() == ".png":
            from PIL import Image

            with Image.open(path) as image:
                return str(image.info.get("Software", "")).startswith(PNG_METADATA["Software"])
        with open(path, "rb") as fh:
            return PAGE_MARK.encode() in fh.read(1 << 16)
    except Exception:  # not an image, not readable: not ours
        return False


def check_replace(path: Path, force: bool, flag: str = "--out") -> None:
    """Refuse, in one line, to replace a file memrl did not write unless ``force``."""
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; name a file")
    if path.exists() and not force and not written_by_memrl(path):
        raise ValueError(f"{flag} {path} exists and memrl did not write it: pass --force to replace it, or name "
                         "another file")
