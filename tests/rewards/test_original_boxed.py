"""memrl's reading of a boxed answer (published protocols) against MemAgent's own evaluation utilities.

MemAgent's ``taskutils/memory_eval/utils/__init__.py`` is loaded from the shared originals folder (skipped when
absent); its ``extract_boxed_answer`` must give what :func:`memrl.rewards.original_boxed.original_boxed` gives,
and where it stops with an assertion memrl's ``box_content`` must say ``Unreadable``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from memrl.rewards.original_boxed import Unreadable, box_content, last_box, original_boxed

REPO = Path(__file__).resolve().parents[2]
UTILS = Path(os.environ.get("MEMRL_SHARED_ORIGINALS", REPO.parent / "shared" / "originals")) / "memagent" / \
    "taskutils" / "memory_eval" / "utils" / "__init__.py"

RESPONSES = [
    "\\boxed{Paris}", "so \\boxed{Lyon} then \\boxed{Paris}.", "\\boxed Paris", "\\boxed Paris$ more $x$",
    "\\boxed {Paris}", "Use \\boxed format. \\boxed{Paris}", "\\boxed{ }", "\\boxed{\\frac{1}{2}}",
    "\\boxed{\\text{New} York}", "\\boxed{unclosed", "no box", "", "\\fbox{x}", "\\boxed\n{Paris}",
    "\\boxed\t{Paris}", "a } b \\boxed{c}", "\\boxed{a}} \\boxed", "x \\boxed", "\\boxed{}", "$\\boxed{12}$",
    "\\boxed{A} and \\boxed {B}", "two\\boxed  spaces", "\\boxed{{nested}}",
]


@pytest.fixture(scope="module")
def original():
    if not UTILS.is_file():
        pytest.skip(f"MemAgent's evaluation utilities are not at {UTILS} (set MEMRL_SHARED_ORIGINALS)")
    spec = importlib.util.spec_from_file_location("memagent_eval_utils", UTILS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.mark.parametrize("response", RESPONSES)
def test_boxed_answers_equal_memagents_reading(original, response):
    assert last_box(response) == original.last_boxed_only_string(response)
    try:
        want = original.extract_boxed_answer(response)
    except AssertionError:  # the original script stops here: memrl must know it cannot read it that way
        box = last_box(response)
        assert box is not None
        with pytest.raises(Unreadable):
            box_content(box)
        return
    assert original_boxed(response) == want
