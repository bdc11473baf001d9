"""Which demo a folder holds: its task and seed, so a resumed demo never mixes two seeds' stages.

Every stage of a demo is reused when its output exists (that is how an interrupted demo resumes), and
nothing in the data, the initial model or the warm start says which seed made it. ``--seed 1 --out``
a folder of seed 0 would otherwise report seed 1's numbers from seed 0's data and warm start, and the
needle and tools demos share stage names (``data``, ``model_init``...). ``demo.json`` records the
task and seed of the first run in a folder, and a run with another is refused before anything loads.
"""

from __future__ import annotations

import json
from pathlib import Path

from memrl.data.outdir import record_outputs
from memrl.io.atomic import atomic_write

CLAIM = "demo.json"


def claim_folder(out: Path, task: str, seed: int, stages: tuple[str, ...]) -> None:
    """Record that ``out`` holds the ``task`` demo of ``seed``; refuse if it holds another one. A folder an
    older memrl wrote (stages, no ``demo.json``) is judged by its summaries' seed, when they have one."""
    held = _held(out, stages)
    if held is not None and held != (task, seed):
        raise ValueError(f"{out} holds the {held[0]} demo of seed {held[1]}; --task {task} --seed {seed} needs "
                         "another --out (or --fresh to delete that demo's outputs there first)")
    if not (out / CLAIM).is_file():
        record_outputs(out, (CLAIM,), by="memrl demo")
        with atomic_write(out / CLAIM) as fh:
            json.dump({"task": task, "seed": seed}, fh)
            fh.write("\n")


def _held(out: Path, stages: tuple[str, ...]) -> tuple[str, int] | None:
    path = out / CLAIM
    if path.is_file():
        try:
            data = json.loads(path.read_text())
            return str(data["task"]), int(data["seed"])
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path}: not a demo record (expected {{\"task\": ..., \"seed\": ...}}); "
                             "remove it, or use another --out") from None
    if not any((out / s).exists() for s in stages):
        return None
    for summary in sorted(out.glob("summary*.json")):
        try:
            data = json.loads(summary.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("seed"), int):
            return ("tools" if "heldout_tickets" in data else "needle"), data["seed"]
    return None
