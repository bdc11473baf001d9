"""``peft.get_peft_model`` without transformers' deprecation warning that peft itself triggers.

peft reads ``model.is_gradient_checkpointing``, which transformers 5 renamed ``is_activation_checkpointing``
and warns about on every read: a FutureWarning in every LoRA run's output that no user setting changes.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def _old_flag_quiet() -> Iterator[None]:
    """Only the warning about the old flag name is silenced inside."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def get_peft_model(model: Any, config: Any, **kwargs: Any) -> Any:
    """``peft.get_peft_model(model, config, **kwargs)``, with only that one warning silenced."""
    from peft import get_peft_model as wrap

    with _old_flag_quiet():
        return wrap(model, config, **kwargs)


def checkpointing(model: Any) -> bool:
    """Whether activation checkpointing is on, read under the new name where the model has it."""
    new = "is_activation_checkpointing"
    name = new if hasattr(model, new) else "is_gradient_checkpointing"
    with _old_flag_quiet():
        return bool(getattr(model, name, False))
