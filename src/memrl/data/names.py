"""Output file names of ``memrl data synth`` and its token-budget syntax."""

from __future__ import annotations


def train_file_name(budget: int) -> str:
    for unit in (1024, 1000):
        if budget % unit == 0:
            return f"train_{budget // unit}k.parquet"
    return f"train_{budget}tok.parquet"


def eval_file_name(n: int, ext: str, *, dataset: str | None = None, min_distance: int | None = None) -> str:
    """``eval_{N}.{ext}``, or ReMemR1's ``eval_{dataset}_{N}[_min_distance_{D}].{ext}`` when ``dataset`` is given.

    memrl's eval finds both (see :mod:`memrl.eval.files`); the plain name suits one folder per
    variant, ReMemR1's lets both datasets and every distance share a folder.
    """
    if dataset is None:
        return f"eval_{n}.{ext}"
    suffix = f"_min_distance_{min_distance}" if min_distance else ""
    return f"eval_{dataset}_{n}{suffix}.{ext}"


def parse_token_budget(text: str) -> int:
    """``32k`` -> 32768, ``28000`` -> 28000, ``1m`` -> 1048576."""
    t = text.strip().lower()
    mult = {"k": 1024, "m": 1024 * 1024}.get(t[-1:], 1)
    try:
        value = int(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise ValueError(f"token budget {text!r} must be an integer, optionally with k or m (e.g. 32k)") from None
    if value <= 0:
        raise ValueError(f"token budget must be positive, got {text!r}")
    return value
