"""Shared fixtures. Tests run offline: hub downloads are disabled here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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
