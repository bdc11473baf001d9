"""Helpers of the real-model tests: run the CLI, report measured numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def memrl(*args: Any, timeout: float = 1200) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the ``memrl`` CLI in a subprocess; (result, wall seconds). Fails the test on a non-zero exit."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"memrl {' '.join(map(str, args[:2]))} exited {r.returncode}:\n{r.stdout[-3000:]}\n" \
                              f"{r.stderr[-3000:]}"
    return r, time.perf_counter() - t0


def report(path: str, **numbers: Any) -> None:
    """One line of measured numbers, printed and (with MEMRL_REAL_REPORT) appended to a file."""
    line = f"REAL {path}: " + ", ".join(f"{k} {v}" for k, v in numbers.items())
    print(line)
    if os.environ.get("MEMRL_REAL_REPORT"):
        with open(os.environ["MEMRL_REAL_REPORT"], "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def eval_numbers(out: Path, key: str, wall: float) -> dict[str, Any]:
    """Accuracy, seconds per episode and generated tokens per second of one ``memrl eval`` folder."""
    row = json.loads((out / "results.json").read_text())["by_docs"][key]
    episodes = [json.loads(p.read_text()) for p in (out / "episodes" / key).glob("*.json")]
    tokens = sum(e["metrics"].get("response_tokens", 0) for e in episodes)
    return {"sub_em %": round(row["sub_em"], 1), "episodes": row["finished"],
            "s/episode": row["seconds_per_episode"], "tokens/s": round(tokens / wall, 1)}
