"""Shared fixtures. Tests run offline: hub downloads are disabled here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist each worker takes its share of the cores. torch's default (every core in every process)
# oversubscribes them, and OpenMP's waiting threads then cost time (2 cores, 2 workers: tests/train 265 s -> 203 s,
# the whole suite 957 s -> 884 s). Set before torch loads, so the memrl processes tests start inherit it.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
# Built models (the 'tiny' alias) go to a per-run cache, never the user's home.
# The process that makes it removes it at exit (workers and subprocesses inherit it).
if "MEMRL_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["MEMRL_CACHE"] = tempfile.mkdtemp(prefix="memrl-test-cache-")
    atexit.register(shutil.rmtree, os.environ["MEMRL_CACHE"], ignore_errors=True)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MEMRL_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (real HotpotQA sample); tests using it skip on a user's machine."""
    if not (SHARED_DATA / "hotpotqa_dev_head53.json").is_file():
        pytest.skip(f"shared data not found at {SHARED_DATA} (set MEMRL_SHARED_DATA to run these tests)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def hotpot_file(shared_data: Path) -> Path:
    return shared_data / "hotpotqa_dev_head53.json"


@pytest.fixture(scope="session")
def tiny_model():
    """The 'tiny' alias: a random Qwen2-architecture model and its tokenizer."""
    from memrl.models.resolve import load_model, load_tokenizer

    return load_model("tiny", device="cpu"), load_tokenizer("tiny")


def pytest_collection_modifyitems(config, items):
    """``slow`` tests run only with MEMRL_SLOW=1 (``make test-slow``)."""
    if os.environ.get("MEMRL_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow/opt-in: run with MEMRL_SLOW=1 (make test-slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


SHARED_TAU2 = Path(os.environ.get("MEMRL_SHARED_TAU2", REPO.parent / "shared" / "tau2"))


@pytest.fixture(scope="session")
def tau2_dir() -> Path:
    """``../shared/tau2`` (τ²-bench domain files); tests using it skip when absent."""
    if not (SHARED_TAU2 / "retail" / "tasks.json").is_file():
        pytest.skip(f"tau2-bench domain files not found at {SHARED_TAU2} (set MEMRL_SHARED_TAU2 to run these tests)")
    return SHARED_TAU2


@pytest.fixture(autouse=True)
def _fresh_notices():
    """Notices print once per process (a moved config key): each test starts as a fresh process would, so a
    test's output does not depend on which tests ran before it in the same worker."""
    from memrl.config import renames

    renames._NOTICED.clear()
    yield
