"""What one synthesized file holds, for ``memrl data synth``'s token report (every protocol writes one)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class FileReport:
    """What one synthesized file holds, for the token report."""

    path: str
    kind: str
    num_samples: int
    docs: int | None = None
    docs_min: int = 0
    docs_max: int = 0
    tokens_min: int = 0
    tokens_mean: float = 0.0
    tokens_max: int = 0
    tokens_total: int = 0
    tokenizer: str = ""
    token_counts: list[int] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("token_counts")
        return d


def file_report(path: str | Path, kind: str, counts: Sequence[int], ndocs: Sequence[int],
                tokenizer: str) -> FileReport:
    """The report of a file whose samples have ``counts`` tokens and ``ndocs`` documents (one each)."""
    if not counts:
        return FileReport(path=str(path), kind=kind, num_samples=0, tokenizer=tokenizer)
    return FileReport(
        path=str(path), kind=kind, num_samples=len(counts),
        docs=ndocs[0] if len(set(ndocs)) == 1 else None,
        docs_min=min(ndocs), docs_max=max(ndocs),
        tokens_min=min(counts), tokens_mean=round(statistics.fmean(counts), 1),
        tokens_max=max(counts), tokens_total=sum(counts),
        tokenizer=tokenizer, token_counts=list(counts),
    )
