"""Several ``memrl eval`` folders overlaid in one picture (``memrl plot EVAL EVAL ...``) and one table.

Why: the figure a long-context paper shows is accuracy against context length, one line per model (the
base model, the RL-trained one, a baseline); a tool-agent paper shows pass^k against k. Each eval folder
already holds its numbers in ``results.json``; this draws them on the same axes.

Three kinds of results are drawn, and only folders of one kind together:

* long-context QA (``by_docs``): ``sub_em`` (default), ``em`` or ``f1`` against mean context tokens;
* the RULER suite (``suite: ruler``): the average over tasks (default) or one task's score against length;
* pass^k (tool agents, a workflow on a file of samples): pass^k in percent against k.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrl.eval.report import METRICS
from memrl.io.labels import folder_labels
from memrl.io.own_files import PNG_METADATA

PASS_K = "pass^k"


@dataclass
class Curve:
    """One folder's points: x values, their column names in the table, and the y values (percent)."""

    x: list[float]
    names: list[str]
    y: list[float | None]


def read_results(folder: Path) -> dict[str, Any]:
    """``folder/results.json`` as a dict; a one-line error for a missing or damaged file."""
    path = folder / "results.json"
    if not path.is_file():
        raise ValueError(f"{folder}: no results.json (not a `memrl eval --out` folder, or no sample finished yet)")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return value


def result_kind(results: dict[str, Any], where: Path) -> str:
    if results.get("suite") == "ruler":
        return "RULER"
    if isinstance(results.get("by_docs"), dict):
        return "long-context"
    if isinstance(results.get("pass_hat_k"), dict):
        return PASS_K
    raise ValueError(f"{where}/results.json: neither long-context (by_docs), RULER nor pass^k results")


def metric_names(kind: str, results: dict[str, Any]) -> list[str]:
    """What ``--metric`` may name for a kind of results (the first is the default)."""
    if kind == "long-context":
        return list(METRICS)
    if kind == "RULER":
        return ["average", *results.get("tasks", [])]
    return [PASS_K]


def curve(kind: str, results: dict[str, Any], metric: str) -> Curve:
    """The points of one metric of one folder's results."""
    if kind == "long-context":
        rows = results["by_docs"]
        docs = [n for n in sorted(rows, key=int) if rows[n].get("finished")]
        return Curve([max(float(rows[n]["context_tokens"] or 1.0), 1.0) for n in docs], [f"{n} docs" for n in docs],
                     [rows[n].get(metric) for n in docs])
    if kind == "RULER":
        lengths = [int(n) for n in results["lengths"]]
        if metric == "average":
            ys = [results["average"].get(str(n)) for n in lengths]
        else:
            row = results["by_task"].get(metric, {})
            ys = [(row.get(str(n)) or {}).get("score") for n in lengths]
        return Curve([float(n) for n in lengths], [_length(n) for n in lengths], ys)
    ks = sorted(results["pass_hat_k"], key=int)
    return Curve([float(k) for k in ks], [f"pass^{k}" for k in ks], [100 * float(results["pass_hat_k"][k]) for k in ks])


def _length(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else f"{n:,}"


def pick_metrics(kind: str, all_results: Sequence[dict[str, Any]], asked: Sequence[str] | None) -> list[str]:
    """``asked`` (each checked against what the kind offers), else the kind's default."""
    offered = list(dict.fromkeys(m for r in all_results for m in metric_names(kind, r)))
    if not asked:
        return offered[:1]
    for m in asked:
        if m not in offered:
            raise ValueError(f"--metric {m!r} for {kind} evals: one of {', '.join(offered)}")
    return list(dict.fromkeys(asked))


def table(labels: Sequence[str], curves: Sequence[Curve]) -> tuple[list[str], list[list[str]]]:
    """(column names, a row per folder): the value at each point any folder has, '-' where it has none."""
    columns = list(dict.fromkeys(name for c in curves for name in c.names))
    rows = []
    for label, c in zip(labels, curves):
        at = dict(zip(c.names, c.y))
        rows.append([label, *("-" if at.get(n) is None else f"{at[n]:.1f}" for n in columns)])
    return ["eval", *columns], rows


def plot_evals(folders: Sequence[Path], out: Path, metrics: Sequence[str] | None = None) \
        -> tuple[Path, list[tuple[str, list[str], list[list[str]]]]]:
    """Write the PNG (one panel per metric, one line per folder); (its path, per metric its table)."""
    all_results = [read_results(f) for f in folders]
    kinds = [result_kind(r, f) for r, f in zip(all_results, folders)]
    if len(set(kinds)) > 1:
        pairs = ", ".join(f"{f} ({k})" for f, k in zip(folders, kinds))
        raise ValueError(f"cannot overlay evals of different kinds: {pairs}")
    kind = kinds[0]
    chosen = pick_metrics(kind, all_results, metrics)
    labels = folder_labels(folders)
    protocols = [r.get("protocol", "memrl") for r in all_results]
    if len(set(protocols)) > 1:  # one metric name, other definitions (sub-EM is two-way under memagent's)
        labels = [f"{label} ({p})" for label, p in zip(labels, protocols)]
    panels = [(m, [curve(kind, r, m) for r in all_results]) for m in chosen]
    if not any(y is not None for _, curves in panels for c in curves for y in c.y):
        raise ValueError(f"nothing to plot: no {', '.join(chosen)} value in {', '.join(map(str, folders))} "
                         "(did every episode fail? see failures/ there)")
    _draw(out, kind, labels, panels)
    return out, [(m, *table(labels, cs)) for m, cs in panels]


def _draw(out: Path, kind: str, labels: Sequence[str], panels: Sequence[tuple[str, list[Curve]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    from memrl.io.atomic import atomic_path

    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.2), dpi=120, squeeze=False)
    for ax, (metric, curves) in zip(axes[0], panels):
        for label, c in zip(labels, curves):
            pts = [(x, y) for x, y in zip(c.x, c.y) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", ms=4, label=label)
        if kind == PASS_K:
            ax.set_xlabel("k (trials that must all succeed)")
            ax.set_xticks(sorted({x for c in curves for x in c.x}))
        else:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1024:g}K" if v >= 1024 else f"{v:g}"))
            ax.set_xlabel("context length (tokens, log scale)")
        ax.set_ylim(-2, 102)
        ax.set_ylabel(f"{metric} (%)")
        ax.set_title(f"{kind}: {metric}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", metadata=PNG_METADATA)
    plt.close(fig)
