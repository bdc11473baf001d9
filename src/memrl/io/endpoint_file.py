"""``RUN/online.json``: where a run's online endpoint is, for scripts started beside the run.

Written atomically by the gateway when its endpoint opens (a poller never reads half a file) and removed when
it closes. A run killed without closing (SIGKILL, the OOM killer) leaves it behind, naming a dead port that
may later belong to another process; the next run in the folder removes it as soon as it holds the folder's
lock, before its model loads, so for the whole of its start-up no agent is sent there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memrl.io.atomic import atomic_write

ADDRESS_FILE = "online.json"


def write_address(run_dir: str | Path, address: dict[str, Any]) -> Path:
    """Write ``address`` (url, episodes, status, host, port, ...) with this process's pid to ``RUN/online.json``."""
    path = Path(run_dir) / ADDRESS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        f.write(json.dumps({**address, "pid": os.getpid()}) + "\n")
    return path


def drop_stale_address(run_dir: str | Path) -> None:
    """Remove a dead run's ``RUN/online.json`` (call it while holding the folder's lock: no live run wrote it)."""
    Path(run_dir, ADDRESS_FILE).unlink(missing_ok=True)
