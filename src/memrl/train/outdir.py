"""Output folders for exported models: refuse to mix into old ones, replace them whole when asked.

``atomic_dir`` alone keeps an existing target (it assumes a racing writer
produced the same thing), so exporting step 30 over an export of step 10 used
to leave step 10's weights in place and still report success.

``--force`` replaces an earlier export only: ``export RUN --out OTHER --force`` used to delete
OTHER whatever it held (another training run, a folder with the user's notes). An export
records what it wrote in ``.memrl-output`` (:mod:`memrl.data.outdir`, owner ``memrl export``);
a folder exported before that record existed is recognised by holding model files only.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from memrl.data.outdir import MANIFEST, check_writable_dir, entry_owners, record_outputs, recorded_owners
from memrl.data.runlock import LOCK_NAME
from memrl.io.atomic import atomic_dir

EXPORTED_BY = "memrl export"  # the manifest's owner of a model folder (export, sft, rft and the demo's)
# What a Hugging Face model folder holds (save_pretrained of a model and its tokenizer), and the demo's report:
# a folder of these only, with config.json, is taken for an export made before exports kept a manifest.
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
               "pytorch_model*.bin", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
               "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model",
               "chat_template.jinja", "chat_template.json", "warm_check.json")


def check_target(out: Path, force: bool, inputs: Iterable[Path] = ()) -> None:
    """Refuse a file, a non-empty folder unless ``force`` (it will then be replaced as a whole; only an earlier
    export may be, :func:`check_replaceable`), and a folder whose replacement would destroy what the command
    reads or where the user stands.

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
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ValueError(f"--out {out} is not empty; choose a new folder, or pass --force to replace it")
        check_replaceable(out)
    check_writable_dir(out)  # a read-only place fails now, not after the model is loaded and merged


def check_replaceable(out: Path) -> None:
    """Refuse, in one line, to let ``--force`` replace a folder that is not an earlier export: a training run,
    an eval folder, another command's outputs, or one holding anything memrl did not write."""
    if (out / "checkpoints").is_dir() or (out / "metrics.jsonl").is_file():
        raise ValueError(f"--out {out} is a training run (it holds checkpoints/ or metrics.jsonl); --force replaces "
                         "only an earlier export: choose another --out")
    if (out / "eval_config.yaml").is_file():
        raise ValueError(f"--out {out} is a memrl eval folder (it holds eval_config.yaml); --force replaces only an "
                         "earlier export: choose another --out")
    owners = recorded_owners(out)
    legacy = owners is None and (out / "config.json").is_file()  # an export from before exports kept a manifest
    for name in sorted(n for n in os.listdir(out) if n not in (MANIFEST, LOCK_NAME)):
        if legacy and any(fnmatch.fnmatch(name, pattern) for pattern in MODEL_FILES):
            continue
        wrote = entry_owners(name, owners or {}) or set()
        if EXPORTED_BY in wrote:
            continue
        if wrote:
            raise ValueError(f"--out {out}: --force refuses to replace it: it holds {name!r}, which "
                             f"{' and '.join(sorted(wrote))} wrote, not an export; choose another --out")
        raise ValueError(f"--out {out}: --force refuses to replace it: it holds {name!r}, which memrl did not "
                         "write; remove it yourself or choose another --out")


def mark_export(folder: Path) -> None:
    """Record every entry of a model folder about to become ``--out`` as an export's, so that a later
    ``--force`` may replace it (and nothing else)."""
    record_outputs(folder, [n for n in os.listdir(folder) if n != MANIFEST], by=EXPORTED_BY, written=True)


def _recover_parked(out: Path) -> None:
    """A process killed between parking the old ``out`` and renaming the new one in left ``out`` missing and the
    old folder in ``.OUT.XXXXXXXX.old/OUT`` (a whole model, never removed): put it back if ``out`` is still
    missing, else drop it. Only folders of exactly that shape (the parking name, one entry named OUT) are touched."""
    shape = re.compile(rf"^\.{re.escape(out.name)}\.[A-Za-z0-9_]{{8}}\.old$")
    for parked in out.parent.glob(f".{glob.escape(out.name)}.*.old"):
        if not (shape.match(parked.name) and parked.is_dir() and os.listdir(parked) == [out.name]):
            continue
        if not out.exists():
            (parked / out.name).rename(out)
        shutil.rmtree(parked, ignore_errors=True)


@contextlib.contextmanager
def replacing_dir(out: Path) -> Iterator[Path]:
    """Yield a temp folder that becomes ``out`` when the block succeeds, replacing any folder there.

    The old folder is moved aside only after the new one is complete and is
    put back if the final rename fails, so ``out`` is never left half-written.
    """
    out = out.resolve()  # "." has no name: the old folder's parking place must never be its parent
    _recover_parked(out)
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
