"""Turn expected user errors into one-line messages and exit code 2 (no traceback)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from memrl.config import ConfigError
from memrl.data.errors import DataError
from memrl.models.resolve import ModelNotFoundError

F = TypeVar("F", bound=Callable[..., Any])

USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError, DataError, ModelNotFoundError, FileNotFoundError, ValueError,
)


def user_errors(fn: F) -> F:
    """Decorator for CLI commands: a bad flag, file or row ends with ``error: ...``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
