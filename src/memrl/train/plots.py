"""Training curves of one run, or of several overlaid, as a PNG (``memrl plot``) and a summary table.

Why several: the question a researcher asks of a curve is nearly always "compared with what": GRPO
against GiGPO, seed 0 against seed 1, before and after a change. Overlaying runs on the same panels,
one colour per run, answers it at a glance, and the table beside it gives the numbers (last, best).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.io.labels import folder_labels
from memrl.io.metrics import numeric_keys, read_metrics
from memrl.io.own_files import PNG_METADATA

DEFAULT_KEYS = ("reward", "eval/accuracy", "response_tokens", "kl", "entropy", "grad_norm")
ALWAYS_DRAWN = ("reward", "eval/accuracy")  # a run that learns nothing must show it: 0 throughout is the news
COLUMNS = 3  # panels per row


@dataclass
class Series:
    """One run's values of one metric, in step order."""

    steps: list[int]
    values: list[float]


def series(rows: Sequence[dict[str, Any]], key: str) -> Series:
    pts = sorted((r["step"], float(r[key])) for r in rows
                 if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool))
    return Series([p[0] for p in pts], [p[1] for p in pts])


def smoothed(values: list[float], window: int) -> list[float]:
    """Trailing mean over ``window`` points (the first points average what there is so far), of the finite ones:
    a NaN or inf (a step whose updates were all skipped) must not erase the curve for the rest of the run."""
    out = []
    for i in range(len(values)):
        kept = [v for v in values[max(0, i + 1 - window): i + 1] if math.isfinite(v)]
        out.append(sum(kept) / len(kept) if kept else math.nan)
    return out


def pick_keys(runs: Sequence[list[dict[str, Any]]], asked: Sequence[str] | None) -> list[str]:
    """The metrics to draw: ``asked`` (each must be in some run, else one line naming the closest) or the
    default ones that some run has."""
    have = list(dict.fromkeys(k for rows in runs for k in numeric_keys(rows)))
    if not asked:  # a default metric that is 0 throughout (kl without a KL term) is left out, but not a reward
        keys = [k for k in DEFAULT_KEYS if k in have and (k in ALWAYS_DRAWN or any(
            v for rows in runs for v in series(rows, k).values))]
        if not keys:
            raise ValueError(f"metrics.jsonl has none of {', '.join(DEFAULT_KEYS)}; pick some with --metric "
                             f"(it has: {', '.join(have[:20]) or 'no numbers'})")
        return keys
    for key in asked:
        if key not in have:
            close = difflib.get_close_matches(key, have, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"--metric {key!r}: no run has it{hint} (available: {', '.join(have[:20])}"
                             f"{', ...' if len(have) > 20 else ''})")
    return list(dict.fromkeys(asked))


def summary(labels: Sequence[str], runs: Sequence[list[dict[str, Any]]], keys: Sequence[str]) -> list[list[str]]:
    """Rows ``[run, steps, 'last (best at step s)' per key]`` for the table ``memrl plot`` prints."""
    table = []
    for label, rows in zip(labels, runs):
        cells = [label, str(max((r["step"] for r in rows), default=0))]
        for key in keys:
            s = series(rows, key)
            if not s.values:
                cells.append("-")
                continue
            finite = [i for i, v in enumerate(s.values) if math.isfinite(v)]
            odd = len(s.values) - len(finite)
            note = f"; {odd} non-finite" if odd else ""
            if finite:
                best = max(finite, key=lambda i: s.values[i])
                cells.append(f"{s.values[-1]:.4g} (max {s.values[best]:.4g} @ {s.steps[best]}{note})")
            else:
                cells.append(f"{s.values[-1]:.4g} (no finite value)")
        table.append(cells)
    return table


def plot_runs(run_dirs: Sequence[Path], out: Path, keys: Sequence[str] | None = None,
              smooth: int = 1) -> tuple[Path, list[list[str]], list[str]]:
    """Write the PNG; (its path, the summary rows, the metrics drawn). ``smooth`` > 1 draws each run's
    trailing mean over that many steps in full colour over its raw values, faint."""
    if smooth < 1:
        raise ValueError(f"--smooth must be at least 1 (steps averaged), not {smooth}")
    runs = [read_metrics(d) for d in run_dirs]
    labels = folder_labels(run_dirs)
    drawn = pick_keys(runs, keys)
    _draw(out, labels, runs, drawn, smooth)
    return out, summary(labels, runs, drawn), drawn


def _draw(out: Path, labels: Sequence[str], runs: Sequence[list[dict[str, Any]]], keys: Sequence[str],
          smooth: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from memrl.io.atomic import atomic_path

    cols = min(COLUMNS, len(keys))
    nrows = -(-len(keys) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.0 * cols, 3.1 * nrows), dpi=110, squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes.flat, keys):
        for i, (label, rows) in enumerate(zip(labels, runs)):
            s = series(rows, key)
            if not s.values:
                continue
            colour = colours[i % len(colours)]
            dash = ("-", "--", ":")[(i // len(colours)) % 3]  # past the 10 colours, runs differ by line style
            # a point with no neighbour draws no line: eval curves and short series get markers
            marker = "o" if key.startswith("eval/") or len(s.values) < 3 else None
            if smooth > 1 and not key.startswith("eval/"):
                ax.plot(s.steps, s.values, "-", color=colour, alpha=0.25, lw=1)
                ax.plot(s.steps, smoothed(s.values, smooth), color=colour, marker=marker, ms=3, ls=dash, label=label)
            else:
                ax.plot(s.steps, s.values, color=colour, marker=marker, ms=3, ls=dash, label=label)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    if len(labels) > 1:  # one legend for the figure: a run missing from the first panel is still named
        named: dict[str, Any] = {}
        for ax in axes.flat:
            for handle, name in zip(*ax.get_legend_handles_labels()):
                named.setdefault(name, handle)
        widest = max(len(n) for n in named)  # ~0.075 inch a character at the legend's size
        ncol = max(1, min(len(named), 4, int(4.0 * cols / (0.075 * widest + 0.6))))
        # below the panels, outside the figure: savefig's tight box takes it in, however many rows it needs
        fig.legend(list(named.values()), list(named), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol,
                   frameon=False)
    title = labels[0] if len(labels) == 1 else f"{len(labels)} runs"
    fig.suptitle(title + (f" (trailing mean of {smooth} steps)" if smooth > 1 else ""))
    fig.tight_layout()
    with atomic_path(out) as tmp:  # tight: a legend of long run names below one panel is kept whole
        fig.savefig(tmp, format="png", bbox_inches="tight", metadata=PNG_METADATA)
    plt.close(fig)
