"""vLLM tests: they run vLLM itself (its CPU build in CI: ``make test-vllm``); elsewhere they skip."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def _bind_this_worker_to_its_own_core() -> None:
    """Under ``pytest -n N`` (``make test-vllm``) give each worker's engines their own core.

    vLLM's CPU build binds its OpenMP threads itself ("auto": the first cores, the last one left for the
    caller), so two workers' engines would share one core while the other idles. A worker's engines, and
    the CLI processes it starts, inherit this variable.
    """
    if importlib.util.find_spec("vllm") is None:  # the main suite collects this folder too: nothing to bind
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker.startswith("gw") and 1 < count <= len(cores) and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[int(worker[2:]) % len(cores)])
        os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"


_bind_this_worker_to_its_own_core()

# Files by how long they take (2-core CPU, 2026-12-03: 90, 120, 110, 90, 75, 75 s, then under 30 s): under
# `--dist loadfile --no-loadscope-reorder` the long ones start first and no long one is left alone at the end.
_FIRST = ("test_replicas.py", "test_servers.py", "test_cli.py", "test_training.py", "test_engine.py", "test_faults.py")
HERE = Path(__file__).parent


def _rank(item: pytest.Item) -> int:
    if item.path.parent != HERE:  # this hook sees the whole session's items: others keep their order
        return len(_FIRST)
    return next((i for i, name in enumerate(_FIRST) if item.path.name == name), len(_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)


# Options shared by every engine the tests start: float32 so vLLM and transformers agree to 1e-4,
# a 4K window, a quarter GiB of KV cache, eager mode (the default) for a fast start.
VLLM_OVERRIDES = ["model.path=tiny32", "model.dtype=float32", "engine.kind=vllm",
                  "engine.vllm.max_model_len=4096", "engine.vllm.kv_cache_memory=0.25"]
